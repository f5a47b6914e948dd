"""``air run -f workload.yaml``: the AI Runtime's workload command, run by this package on this machine.

The way a run travels: :mod:`.loading` reads the file and applies ``--override`` pairs, :mod:`.schema` validates it
field by field; :mod:`.runs` (what the CLI calls) records the run in the :mod:`.registry`, snapshots the code
(:mod:`.snapshot`) and hands the run to a backend (:mod:`.backends`); for the local backend a detached supervisor
(:mod:`.supervisor`) owns the run from then on: dependencies (:mod:`.environments`), secrets
(:mod:`.secret_store`), one MLflow run per attempt (:mod:`.attempt_tracking`), retries, the timeout, cancel, and
the node's output (:mod:`.node_output`, fatal lines from :mod:`databricks.air.log_patterns`). :mod:`.cli` parses
arguments and shows results; it knows nothing of processes.
"""
