"""``python -m databricks.air.workloads.backends.ray_supervisor``: the entrypoint of a workload's Ray job.

It runs in the job's working directory (:mod:`.ray_package`), on the node where Ray runs job drivers, and owns the
run from there to its end, whatever happens to the machine that submitted it: the same
:class:`~..supervisor.WorkloadSupervisor` as on this machine (retries, timeouts, MLflow runs, alerts), its nodes from
:class:`~.ray_nodes.RayNodes`, its run folder the working directory, every state and every line of output also
written to the job's log as frames (:mod:`.ray_report`) for the submitting machine's registry. It first reads and
removes the run's private file (the secrets' values). SIGTERM (``air cancel``, ``ray job stop``) stops the run:
every node's command is stopped, its actors and placement group freed, and the run ends ``CANCELED``. Its exit
status is 0 only when the run ended ``SUCCESS``, so the Ray job's status follows the run's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Dict

from databricks.air.workloads import secret_store, statuses
from databricks.air.workloads.backends.ray_node_host import remove_private_file
from databricks.air.workloads.backends.ray_package import read_spec
from databricks.air.workloads.backends.ray_report import Reporter, ReportingRunFolder
from databricks.air.workloads.registry import CONFIG, HYPERPARAMETERS, SPEC, write_atomically
from databricks.air.workloads.run_state import RunSpec, RunState

FORWARDED_SCOPE = "air-forwarded"
"""The secret scope of the submitter's credentials (MLflow's) that the run uses: redacted and set like secrets."""
STOPPED_REASON = "canceled: the Ray job was stopped (air cancel, or ray job stop)"


def secret_variables(spec: RunSpec, secrets: Dict[str, str]) -> Dict[str, str]:
    """The secret store's variables that make ``secrets`` (``NAME -> value``) resolve here as they did there."""
    found = {}
    for name, value in secrets.items():
        if name in spec.secrets:
            found[secret_store.variable_name(secret_store.parse_ref(spec.secrets[name]))] = value
    return found


def _stop_on_sigterm(wake: threading.Event) -> None:
    signal.signal(signal.SIGTERM, lambda *_: wake.set())


def main() -> int:
    wake = threading.Event()
    _stop_on_sigterm(wake)  # first of all: a stop may come at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    root = os.getcwd()
    private = remove_private_file(root) or {}
    reporter = Reporter()
    spec = read_spec(root)
    credentials = dict(private.get("credentials") or {})
    os.environ.update(credentials)  # MLflow in this process needs them too
    spec.secrets = {**spec.secrets, **{name: f"{FORWARDED_SCOPE}/{name}" for name in credentials}}
    secrets = {**dict(private.get("secrets") or {}), **credentials}
    # Ray may remove the working directory and unpack it again at any time (connecting does), so the supervisor
    # keeps what it reads and writes in a folder of its own, removed at the end; its state went to the job's log.
    run_dir = tempfile.mkdtemp(prefix=f"air-run-{spec.run_id}-")
    try:
        for name in (CONFIG, HYPERPARAMETERS):
            if os.path.isfile(os.path.join(root, name)):
                shutil.copyfile(os.path.join(root, name), os.path.join(run_dir, name))
        write_atomically(os.path.join(run_dir, SPEC), json.dumps(spec.to_dict(), indent=1).encode())
        os.chdir(run_dir)
        folder = ReportingRunFolder(run_dir, spec.run_id, reporter, node_root=root)
        folder.write_state(
            RunState(
                run_id=spec.run_id,
                status=statuses.PENDING,
                submitted_at=time.time(),
                message="the Ray job started; connecting to the cluster",
            )
        )
        status = _supervise(folder, spec, root, secrets, wake, reporter)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(f"air: run {spec.run_id} ended {status}", file=sys.stderr, flush=True)
    return 0 if status == statuses.SUCCESS else 1


def _supervise(
    folder: ReportingRunFolder,
    spec: RunSpec,
    root: str,
    secrets: Dict[str, str],
    wake: threading.Event,
    reporter: Reporter,
) -> str:
    from databricks.air._ray import session
    from databricks.air.workloads.backends.ray_nodes import RayNodes
    from databricks.air.workloads.supervisor import WorkloadSupervisor

    ray = session.connect_job_driver(log_to_driver=False)  # the nodes' output comes through their hosts
    _stop_on_sigterm(wake)  # ray.init put its own handler in place, which exits at once, leaving every node running
    try:
        launcher = RayNodes(root, spec.accelerator_type, name=f"air-run-{spec.run_id}")
        supervisor = WorkloadSupervisor(
            folder,
            launcher,
            environ={**os.environ, **secret_variables(spec, secrets)},
            wake=wake,
            woken_reason=STOPPED_REASON,
            echo=reporter.node_output,
        )
        return supervisor.run()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
