"""The Ray backend: a workload runs on a Ray cluster as a Ray job, one command per node of a placement group.

``air run -f FILE --backend ray [--address ADDRESS] [--nodes N]``. Submitting (:meth:`RayBackend.start`) packs the
run's files into the job's working directory (:mod:`.ray_package`) and submits a job through the cluster's
dashboard (Ray's job submission API) whose entrypoint is the run's supervisor (:mod:`.ray_supervisor`): the run
lives on the cluster from then on, and the machine that submitted it may close. The registry here records the job's
id and the dashboard's address; readers bring the run's state and node logs into its folder from the job's log
(:mod:`.ray_report`): :meth:`RayBackend.reconcile` fetches it, :meth:`RayBackend.following` streams it while
``logs`` or ``run --watch`` follow the run. ``cancel`` stops the job; the supervisor stops every node first.

Sent with the job, visible in the dashboard: the workload's ``env_variables``, the MLflow store's URI and the
package's own switches (``DATABRICKS_AIR_MLFLOW``...). Sent inside the working directory, never shown: the
secrets' values (resolved here, from the local secret store) and MLflow's credentials.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional

from databricks.air import _variables, compute
from databricks.air._ray.forwarded_environ import NAMED_STORES, absolute_store
from databricks.air.workloads import attempt_tracking, secret_store, statuses, supervisor
from databricks.air.workloads.backends import ray_package, ray_report
from databricks.air.workloads.backends.base import Backend, CannotPlace
from databricks.air.workloads.backends.ray_jobs import TERMINAL, RayJobs
from databricks.air.workloads.backends.ray_node_request import NodeRequest, node_plan
from databricks.air.workloads.errors import UnsupportedHere, WorkloadError
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import NodePlan, RunState
from databricks.air.workloads.workload import Workload

ENTRYPOINT = "python -m databricks.air.workloads.backends.ray_supervisor"
JOB_ID, ADDRESS = "ray_job_id", "ray_address"
"""The owner's keys: the Ray job's submission id, and the dashboard it was submitted to."""
SWITCHES = (
    _variables.MLFLOW,
    _variables.SYSTEM_METRICS,
    _variables.SYSTEM_METRICS_SECONDS,
    _variables.LOG_UPLOAD_SECONDS,
    _variables.TERMINATE_GRACE_SECONDS,
    _variables.RETRY_DELAY_SECONDS,
    _variables.ACCELERATOR_TYPE,
)
"""The package's variables that the run on the cluster keeps from the submitter's environment."""
CREDENTIALS = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "DATABRICKS_HOST",
    "DATABRICKS_TOKEN",
    "DATABRICKS_CLIENT_ID",
    "DATABRICKS_CLIENT_SECRET",
)
"""The submitter's credentials of the MLflow store, sent like secrets (redacted from the output)."""
SYNC_SECONDS = 0.5
"""How often one process asks the cluster for a run's log, at most, when no stream is open."""
_STOP_WAIT_EXTRA_SECONDS = 20  # Ray's time between SIGTERM and SIGKILL of the supervisor: its grace, and more

_clusters: Dict[str, RayJobs] = {}
_streams: Dict[str, threading.Thread] = {}
_synced: Dict[str, float] = {}


def cluster(url: str) -> RayJobs:
    """The job API at ``url``, one client per process."""
    if url not in _clusters:
        _clusters[url] = RayJobs(url)
    return _clusters[url]


class RayBackend(Backend):
    """A Ray cluster: one node of the workload per Ray node, as upstream's runtime runs it."""

    name = "ray"

    def __init__(
        self, address: Optional[str] = None, nodes: Optional[int] = None, wait_for_nodes: bool = False
    ) -> None:
        self.address = address
        self.nodes = nodes
        self.wait_for_nodes = wait_for_nodes
        self._jobs: Optional[RayJobs] = None

    def jobs(self) -> RayJobs:
        if self._jobs is None:
            self._jobs = RayJobs.connect(self.address)
            _clusters.setdefault(self._jobs.url, self._jobs)
        return self._jobs

    # --- submitting ----------------------------------------------------------------------------------------------

    def plan(self, workload: Workload) -> NodePlan:
        if workload.image_field is not None:
            raise UnsupportedHere(
                f"environment.{workload.image_field}: the Ray backend runs on the cluster's own Python; list the "
                "workload's packages in environment.dependencies instead (Ray's runtime environment installs them "
                "on each node)."
            )
        if workload.schedule is not None:
            raise UnsupportedHere(
                "schedule: the Ray backend runs a workload once, now; a schedule needs a scheduler "
                "(Databricks jobs). Remove schedule to run it on the cluster."
            )
        wanted = workload.compute
        cpu = wanted.accelerator_type == compute.CPU or compute.cpu_mode_from_environment()
        plan = node_plan(wanted.accelerator_type, wanted.num_accelerators, self.nodes, cpu)
        jobs = self.jobs()
        if not self.wait_for_nodes:
            try:
                NodeRequest(plan, wanted.accelerator_type).bundle(jobs.nodes())
            except CannotPlace as error:
                raise UnsupportedHere(
                    f"{error} (An autoscaling cluster may add nodes that are not up now: submit with "
                    "--wait-for-nodes to let the run wait for them.)"
                ) from None
        return plan

    def notes(self, workload: Workload, plan: NodePlan) -> List[str]:
        notes = []
        wanted = workload.compute
        if plan.cpu and wanted.accelerator_type != compute.CPU:
            notes.append(
                f"{_variables.ACCELERATOR_TYPE}=CPU: running {wanted.accelerator_type} x "
                f"{wanted.num_accelerators} as CPU ranks"
            )
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if attempt_tracking.enabled() and _is_local_store(uri):
            notes.append(
                f"MLFLOW_TRACKING_URI={uri or '(MLflow default)'} names a store on this machine: the "
                "run writes to the same path on the cluster's head node; use a tracking server the "
                "cluster reaches to see its MLflow runs here"
            )
        if workload.databricks_only_fields:
            notes.append(
                f"not used on a Ray cluster (kept for Databricks): {', '.join(workload.databricks_only_fields)}"
            )
        return notes

    def start(self, folder: RunFolder) -> None:
        jobs = self.jobs()
        spec = folder.read_spec()
        refs = {name: secret_store.parse_ref(ref) for name, ref in spec.secrets.items()}
        private = {
            "secrets": secret_store.resolve(refs, os.environ),
            "credentials": {name: os.environ[name] for name in CREDENTIALS if os.environ.get(name)},
        }
        job_id = f"air-{spec.run_id}-{uuid.uuid4().hex[:12]}"
        # Recorded first: a submission interrupted after this still names its job, and reads as what became of it.
        folder.update(
            lambda state: state.owner.update({JOB_ID: job_id, ADDRESS: jobs.url, "dashboard_url": jobs.job_url(job_id)})
        )
        staging = tempfile.mkdtemp(prefix="air-ray-job-")
        try:
            package = os.path.join(staging, f"run-{spec.run_id}.zip")
            ray_package.build(folder, private, package)
            jobs.submit(
                entrypoint=ENTRYPOINT,
                submission_id=job_id,
                runtime_env={"working_dir": package, "env_vars": self._job_variables(spec.env_variables)},
                metadata={
                    "air.run_id": str(spec.run_id),
                    "air.experiment": spec.experiment_name,
                    "air.user": spec.user,
                    "air.accelerators": spec.accelerators,
                },
            )
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _job_variables(self, env_variables: Dict[str, str]) -> Dict[str, str]:
        """The job's ``runtime_env`` variables: visible in the dashboard, so never a secret."""
        variables = dict(env_variables)
        for name in SWITCHES:
            if name in os.environ:
                variables[name] = os.environ[name]
        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if uri:
            variables["MLFLOW_TRACKING_URI"] = absolute_store(uri, os.getcwd())
        variables[_variables.BETA_NOTICE_SHOWN] = "1"  # shown once, here
        variables["RAY_JOB_STOP_WAIT_TIME_S"] = str(int(supervisor.grace_seconds()) + _STOP_WAIT_EXTRA_SECONDS)
        return variables

    # --- stopping ------------------------------------------------------------------------------------------------

    def request_cancel(self, folder: RunFolder, state: RunState) -> None:
        folder.request_cancel()
        job_id, url = state.owner.get(JOB_ID), state.owner.get(ADDRESS)
        if not (job_id and url):
            return
        try:
            cluster(url).stop(job_id)  # SIGTERM to the supervisor, which stops every node, then ends CANCELED
        except Exception as error:  # noqa: BLE001 - the cluster may be gone, or the job ended meanwhile
            raise WorkloadError(f"the Ray cluster at {url} could not be asked to stop job {job_id}: {error}") from None

    # --- reading -------------------------------------------------------------------------------------------------

    def reconcile(self, folder: RunFolder, state: RunState) -> RunState:
        if state.terminal:
            return state
        stream = _streams.get(folder.path)
        if stream is not None and stream.is_alive():
            return state  # the stream keeps the folder up to date
        if time.monotonic() - _synced.get(folder.path, -SYNC_SECONDS) < SYNC_SECONDS:
            return state
        _synced[folder.path] = time.monotonic()
        return self.sync(folder, state)

    def sync(self, folder: RunFolder, state: RunState) -> RunState:
        """Fetch the job's status and log, and bring the folder up to date with them."""
        job_id, url = state.owner.get(JOB_ID), state.owner.get(ADDRESS)
        if not (job_id and url):
            return state  # being submitted (or it failed to be, and says so)
        try:
            jobs = cluster(url)
            info = jobs.info(job_id)  # the status first: a job that has ended has all of its log written
            text = jobs.logs(job_id)
        except Exception as error:  # noqa: BLE001 - the cluster is unreachable now; the run may well go on
            state.message = (
                f"{state.message or state.status} (the Ray cluster at {url} does not answer now: "
                f"{str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__})"
            )
            return state
        return self._settle(folder, text, 0, info)

    def _settle(self, folder: RunFolder, text: str, start: int, info: Any) -> RunState:
        status = getattr(info.status, "value", str(info.status)) if info is not None else None
        ended: Dict[str, Any] = {}

        def settle(state: RunState) -> None:
            if state.terminal or status is None:
                return
            if status in TERMINAL:
                _end_as_the_job_did(folder, state, status, info, ended)
            elif status == "PENDING" and not state.attempts:
                state.message = f"the Ray job is pending{': ' + info.message if info.message else ''}"

        state = ray_report.apply(folder, text, start, settle)
        if ended.get("mlflow_run_id") and state.tracking_uri:
            try:
                attempt_tracking.end_orphaned(state.tracking_uri, ended["mlflow_run_id"], state.message or "")
            except Exception as error:  # noqa: BLE001 - the registry's state is what matters; MLflow is best effort
                print(f"air: could not end MLflow run {ended['mlflow_run_id']}: {error}", file=sys.stderr)
        return state

    @contextlib.contextmanager
    def following(self, folder: RunFolder) -> Iterator[None]:
        state = folder.read_state()
        job_id, url = state.owner.get(JOB_ID), state.owner.get(ADDRESS)
        if state.terminal or not (job_id and url) or folder.path in _streams:
            yield
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._stream,
            args=(folder, cluster(url), job_id, stop),
            daemon=True,
            name=f"air run {folder.run_id} log stream",
        )
        _streams[folder.path] = thread
        thread.start()
        try:
            yield
        finally:
            stop.set()
            _streams.pop(folder.path, None)

    def _stream(self, folder: RunFolder, jobs: RayJobs, job_id: str, stop: threading.Event) -> None:
        """Apply the job's log as it comes; once it ends (the job has ended), settle the run's state."""
        offset, pending = 0, ""
        try:
            for chunk in jobs.tail(job_id, stop):
                pending += chunk
                end = pending.rfind("\n") + 1
                if end:
                    ray_report.apply(folder, pending[:end], offset)
                    offset, pending = offset + end, pending[end:]
        except Exception:  # noqa: BLE001 - a stream that breaks: readers fall back to fetching the log
            pass
        if not stop.is_set():
            try:
                self.sync(folder, folder.read_state())
            except Exception:  # noqa: BLE001 - the next reader tries again
                pass


def _end_as_the_job_did(folder: RunFolder, state: RunState, status: str, info: Any, ended: Dict[str, Any]) -> None:
    """A job that ended while its run had not: the supervisor was stopped before it could say so, or died."""
    job = state.owner.get(JOB_ID)
    if folder.cancel_requested or status == "STOPPED":
        state.status = statuses.CANCELED
        state.message = "canceled (air cancel)" if folder.cancel_requested else f"the Ray job {job} was stopped"
    else:
        tail = ray_report.messages_tail(folder)
        state.status = statuses.FAILED
        state.message = (
            f"the Ray job {job} ended {status} before its run did"
            f"{': ' + info.message if getattr(info, 'message', None) else ''}"
            + (f"\nits last lines:\n{tail}" if tail else "")
        )
    state.ended_at = time.time()
    if state.attempts and state.attempts[-1].get("ended_at") is None:
        state.attempts[-1].update(status=state.status, ended_at=state.ended_at, reason=state.message)
        ended.update(state.attempts[-1])
    state.owner.pop("attempt", None)


def _is_local_store(uri: str) -> bool:
    return not uri or uri.startswith(("file:", "sqlite:")) or ("://" not in uri and uri not in NAMED_STORES)
