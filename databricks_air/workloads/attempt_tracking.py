"""One MLflow run per attempt, in the experiment ``experiment_name``, as each retry is upstream.

Each run is made by :class:`databricks.air._tracking.call_run.CallRun` (the decorator's: the same store resolution and
reachability check, version and host tags, system metrics, link), named ``mlflow_run_name`` (else the experiment),
tagged ``databricks.air.workload.run_id`` and ``databricks.air.workload.attempt``, with the workload's settings as
params and its configuration as run (``workload.yaml``) and ``hyperparameters.yaml`` as artifacts. The command
logs into it through ``MLFLOW_RUN_ID``. Node logs are uploaded as ``logs/node_<n>.log`` every 30 s
(``DATABRICKS_AIR_LOG_UPLOAD_SECONDS``) and at the end; the run ends FINISHED, FAILED (with the reason) or KILLED.
``DATABRICKS_AIR_MLFLOW=0`` turns tracking off, as for the decorator.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, List, Optional

from databricks.air import _settings
from databricks.air._engine.frozen_imports import import_for_life
from databricks.air._tracking import call_run
from databricks.air.workloads import statuses
from databricks.air.workloads.run_state import RunSpec

RUN_ID_TAG = "databricks.air.workload.run_id"
ATTEMPT_TAG = "databricks.air.workload.attempt"
PREVIOUS_ATTEMPT_TAG = "databricks.air.workload.previous_attempt_run_id"
NEXT_ATTEMPT_TAG = "databricks.air.workload.next_attempt_run_id"


def enabled() -> bool:
    """False with ``DATABRICKS_AIR_MLFLOW=0``."""
    return call_run.tracking_enabled()


def experiment_name(spec: RunSpec, tracking_uri: str) -> str:
    """The experiment's name in the store: on Databricks under ``mlflow_experiment_directory`` when given."""
    if tracking_uri.startswith("databricks") and spec.mlflow_experiment_directory:
        return f"{spec.mlflow_experiment_directory.rstrip('/')}/{spec.experiment_name}"
    return spec.experiment_name


class TrackedAttempt:
    """The MLflow run of one attempt."""

    def __init__(self, run: Any, attempt: int, log_paths: List[str]) -> None:
        self.run = run
        self.attempt = attempt
        self.log_paths = log_paths
        self._stop = threading.Event()
        self._uploader: Optional[threading.Thread] = None

    @classmethod
    def open(
        cls,
        spec: RunSpec,
        attempt: int,
        artifacts: List[str],
        log_paths: List[str],
        previous_run_id: Optional[str] = None,
    ) -> "TrackedAttempt":
        """Create the run (``RuntimeConfigurationError`` when the store cannot be reached), linked to the previous
        attempt's run (``previous_run_id``) both ways."""
        import_for_life(["mlflow"])  # the supervisor keeps MLflow to its end
        import mlflow

        os.environ["MLFLOW_EXPERIMENT_NAME"] = experiment_name(spec, mlflow.get_tracking_uri())
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)
        params = {
            "accelerator_type": spec.accelerator_type,
            "num_accelerators": spec.num_accelerators,
            "max_retries": spec.max_retries,
            "timeout_minutes": spec.timeout_minutes,
        }
        run = call_run.CallRun.open(spec.run_name, params)
        run.client.set_tag(run.run_id, RUN_ID_TAG, str(spec.run_id))
        run.client.set_tag(run.run_id, ATTEMPT_TAG, str(attempt))
        if previous_run_id:
            run.client.set_tag(run.run_id, PREVIOUS_ATTEMPT_TAG, previous_run_id)
            try:
                run.client.set_tag(previous_run_id, NEXT_ATTEMPT_TAG, run.run_id)
            except Exception:  # noqa: BLE001 - the link back is a courtesy; the new run names the old one
                pass
        for path in artifacts:
            if os.path.exists(path):
                run.client.log_artifact(run.run_id, path)
        return cls(run, attempt, log_paths)

    @property
    def run_id(self) -> str:
        return str(self.run.run_id)

    @property
    def experiment_id(self) -> str:
        return str(self.run.experiment_id)

    @property
    def tracking_uri(self) -> str:
        return str(self.run.tracking_uri)

    def environ(self) -> Dict[str, str]:
        """``MLFLOW_RUN_ID``, ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_ID`` for the command."""
        return self.run.rank_environ()

    def start(self) -> None:
        """System metrics of this node, and periodic log uploads."""
        self.run.start_system_metrics()
        interval = _settings.LOG_UPLOAD_SECONDS.read(os.environ)  # checked by air run
        self._uploader = threading.Thread(
            target=self._upload_every, args=(interval,), daemon=True, name="air log uploader"
        )
        self._uploader.start()

    def _upload_every(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.upload_logs()

    def upload_logs(self) -> None:
        for path in self.log_paths:
            if os.path.exists(path):
                try:
                    self.run.client.log_artifact(self.run.run_id, path, artifact_path="logs")
                except Exception as error:  # noqa: BLE001 - an upload that fails must not end the run
                    print(f"air: could not upload {path} to MLflow: {error}", file=sys.stderr, flush=True)

    def close(self, status: str, reason: Optional[str]) -> None:
        """Final upload, then the run's end (FINISHED, FAILED with the reason, or KILLED)."""
        self._stop.set()
        if self._uploader is not None:
            self._uploader.join(timeout=60)
        self.upload_logs()
        failure = RuntimeError(reason) if status != statuses.SUCCESS and reason else None
        self.run.close(statuses.MLFLOW_STATUS[status], None, failure)


def run_link(
    tracking_uri: Optional[str], experiment_id: Optional[str], run_id: Optional[str], name: str
) -> Optional[str]:
    """How ``air`` shows an attempt's MLflow run: a link for an HTTP store, else where it is and how to see it."""
    if not (tracking_uri and run_id):
        return None
    return call_run.CallRun(None, run_id, experiment_id or "", tracking_uri, name).describe()


def run_url(tracking_uri: Optional[str], experiment_id: Optional[str], run_id: Optional[str]) -> Optional[str]:
    """The run's page in the MLflow UI, for an HTTP store; ``None`` otherwise."""
    if not (tracking_uri and run_id):
        return None
    return call_run.CallRun(None, run_id, experiment_id or "", tracking_uri, "").url


def end_orphaned(tracking_uri: str, run_id: str, reason: str) -> None:
    """End an attempt's run that its supervisor could not end (it was killed): FAILED, with the reason."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    if run.info.status in ("RUNNING", "SCHEDULED"):
        client.set_tag(run_id, "databricks.air.failure", reason[:5000])
        client.set_terminated(run_id, "FAILED")
