"""One MLflow run per ``.distributed(...)`` call.

The run is created in the caller, nested under the caller's active run when there is one, in the experiment the
caller chose (``mlflow.set_experiment``, else ``MLFLOW_EXPERIMENT_NAME``/``MLFLOW_EXPERIMENT_ID``, else one named
after the notebook or script, else MLflow's default). Ranks join it through ``MLFLOW_RUN_ID``, so a plain
``mlflow.log_metric(...)`` in the function logs into it. The store is whatever MLflow resolves in the caller
(``MLFLOW_TRACKING_URI``, or MLflow's embedded default, a local SQLite file); ``DATABRICKS_AIR_MLFLOW=0`` turns
tracking off.

The run records the call's settings as params, the package version and host as tags, the call's duration, every
rank's output as ``logs/rank_<r>.txt`` (uploaded every 30 s while the call runs, and at the end), and on failure
the root cause as a tag and the whole report as ``failure.txt``. It ends FINISHED, FAILED, or KILLED (interrupt).
"""

from __future__ import annotations

import base64
import dataclasses
import html
import importlib.util
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Mapping, Optional, Tuple

from databricks.air import _notebook, _settings, _variables
from databricks.air._tracking import progress, quiet, rank_side, warmup, writer
from databricks.air._call_folder import SNAPSHOT, CallFolder
from databricks.air._switches import switched_off
from databricks.air.exceptions import LocalExecutionTimeoutError, RuntimeConfigurationError
from databricks.air.version import __version__
from databricks.air._notices import PREFIX, notice

DEFAULT_UPLOAD_SECONDS = _settings.LOG_UPLOAD_SECONDS.default
_TAG_LIMIT = 5000


FAILURE_HINTS = {
    "does not match environment run ID": (
        "Hint: the function chose another MLflow experiment (mlflow.set_experiment) or run, but each "
        ".distributed() call already has its run, and ranks log into it. Call mlflow.set_experiment(...) in the "
        "notebook before .distributed(...), and use plain mlflow.log_*(...) inside the function."
    ),
}


def tracking_enabled() -> bool:
    """False when ``DATABRICKS_AIR_MLFLOW`` is ``0``, ``false`` or ``no``."""
    return not switched_off(_variables.MLFLOW)


def warm_up() -> None:
    """Import MLflow and open the current store in the background, for a call that may come soon
    (:mod:`databricks.air._tracking.warmup`); nothing with tracking off."""
    warmup.start(open_store=True)


def active_run_id() -> Optional[str]:
    """The MLflow run a call made now nests under: this thread's active run, else the main thread's (a notebook's
    run, for a call submitted from a worker thread: MLflow keeps one active run per thread). ``None`` when MLflow
    is not imported (no run can be active), is being imported (by the warm-up: then no run has been started either)
    or no run is."""
    fluent = sys.modules.get("mlflow.tracking.fluent")
    if fluent is None or getattr(getattr(fluent, "__spec__", None), "_initializing", False):
        return None
    active = fluent.active_run()
    if active is not None:
        return active.info.run_id
    stacks: Dict[Any, Any] = getattr(getattr(fluent, "_active_run_stack", None), "get_all_thread_values", lambda: {})()
    main = stacks.get(threading.main_thread().ident) or []
    return main[-1].info.run_id if main else None


@dataclasses.dataclass(frozen=True)
class Caller:
    """The process a call's run is made for: its pid (the run's :data:`CALLER_TAG`) and its notebook's or script's
    name (the default experiment's name)."""

    pid: int
    name: Optional[str]

    @classmethod
    def this_process(cls) -> "Caller":
        return cls(os.getpid(), notebook_or_script_name())


def failure_note(failure: Optional[BaseException]) -> Optional[Tuple[str, str]]:
    """What a run keeps of a call's failure: its class name and its message (the class name for an empty one)."""
    if failure is None:
        return None
    return type(failure).__name__, str(failure) or type(failure).__name__


class RunView:
    """How a call's run is shown to the user: a line (or a link in a notebook), from the run's names alone."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    name: str

    @property
    def url(self) -> Optional[str]:
        """The run's page in the MLflow UI, for an HTTP store."""
        if self.tracking_uri.startswith(("http://", "https://")):
            return f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return None

    def describe(self) -> str:
        if self.url:
            return f"MLflow run {self.name} ({self.run_id}): {self.url}"
        return (
            f"MLflow run {self.name} ({self.run_id}) in {self.tracking_uri}; to see it: "
            f"mlflow ui --backend-store-uri {self.tracking_uri}"
        )

    def show(self) -> None:
        """Show the run once: a link (HTML) in a Jupyter kernel, a plain line elsewhere."""
        if self.url:
            body = f'<a href="{html.escape(self.url)}" target="_blank">MLflow run {html.escape(self.name)}</a>'
        else:
            command = f"mlflow ui --backend-store-uri {self.tracking_uri}"
            body = (
                f"MLflow run <code>{html.escape(self.run_id)}</code> ({html.escape(self.name)}) in "
                f"<code>{html.escape(self.tracking_uri)}</code>; to see it: <code>{html.escape(command)}</code>"
            )
        metadata = {"databricks.air": {"run_id": self.run_id}}
        _notebook.show(body, PREFIX + f"{self.describe()}", metadata=metadata)


class CallRun(RunView):
    """The MLflow run of one call."""

    def __init__(
        self,
        client: Any,
        run_id: str,
        experiment_id: str,
        tracking_uri: str,
        name: str,
        registry_uri: Optional[str] = None,
        snapshot: Optional[str] = None,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.tracking_uri = tracking_uri
        self.registry_uri = registry_uri
        self.snapshot = snapshot
        """The run as created, for the ranks (see ``_variables.RUN_SNAPSHOT``)."""
        self.name = name
        self.started = time.time()
        self._uploader: Optional[_LogUploader] = None
        self._monitor: Any = None
        self._metrics_writer: Optional[writer.MetricsWriter] = None
        self.orphan_sweep: Optional[threading.Thread] = None
        """Ends the runs of this experiment whose callers are gone (:func:`end_orphaned_runs`), in the background."""

    @classmethod
    def open(
        cls,
        name: str,
        params: Dict[str, Any],
        parent_run_id: Optional[str] = None,
        *,
        deadline: Optional[float] = None,
        timeout: Optional[float] = None,
        started: Optional[float] = None,
        caller: Optional["Caller"] = None,
    ) -> "CallRun":
        """Create the run (fails fast, naming the store and the switch, when the store cannot be reached).

        ``deadline`` (a ``time.monotonic()`` time): the call's, so that its timeout covers this too. What MLflow does
        here cannot be interrupted, so it runs on a thread of its own, waited for until then: past it the call
        raises :class:`LocalExecutionTimeoutError` saying what it waited for (MLflow's import, the store), and a run
        the thread makes later is ended at once: FAILED, as a call that timed out ends its run (KILLED after an
        interrupt). ``timeout``: the call's, for that message; ``started`` (``time.monotonic()``): when the call
        began, so that the run's ``duration_seconds`` is the whole call's. ``caller``: the process the run is for,
        when it is not this one (the tracking host makes runs for other processes: :mod:`.tracking_host`).

        MLflow's INFO records of it are not shown; the first use of a SQLite store (seconds, to make its tables)
        says so on a terminal or in a notebook while it lasts."""
        began = time.monotonic()
        warmup.start(open_store=False, hosted=False)  # begun ahead as a rule (decoration): then this changes nothing
        if not warmup.wait(deadline):
            if not warmup.imported():
                raise _set_up_timeout(name, timeout, f"MLflow's import did not end within {_since(began)}")
            uri = sys.modules["mlflow"].get_tracking_uri()
            raise _set_up_timeout(name, timeout, f"the MLflow store at {uri} did not answer within {_since(began)}")
        import mlflow

        uri = mlflow.get_tracking_uri()
        if parent_run_id is None:  # the calling thread's active run (MLflow keeps one per thread), read here
            active = mlflow.active_run()
            parent_run_id = active.info.run_id if active is not None else None
        registry_uri = mlflow.get_registry_uri()
        if deadline is not None and time.monotonic() >= deadline:  # nothing left for the store: no run at all
            raise _set_up_timeout(
                name, timeout, f"MLflow's import took {_since(began)}, and no time was left to make the run"
            )
        caller = caller if caller is not None else Caller.this_process()
        opening = _Opening(cls, mlflow, uri, name, params, parent_run_id, registry_uri, deadline, caller)
        try:
            with progress.transient(_creating_store_note(uri)):
                opened = opening.result(deadline)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted while opening the MLflow run in {uri}; no rank was started") from None
        if opened is None:
            raise _set_up_timeout(name, timeout, f"the MLflow store at {uri} did not answer within {_since(began)}")
        if started is not None:
            opened.started = time.time() - (time.monotonic() - started)
        return opened

    @classmethod
    def _open_here(
        cls,
        mlflow: Any,
        uri: str,
        name: str,
        params: Dict[str, Any],
        parent_run_id: Optional[str],
        registry_uri: Optional[str],
        deadline: Optional[float],
        caller: "Caller",
    ) -> "CallRun":
        with quiet.quiet():
            _check_reachable(uri, deadline)
            warmup.make_store_once(mlflow, uri)
            return cls._open(mlflow, uri, name, params, parent_run_id, registry_uri, caller)

    @classmethod
    def _open(
        cls,
        mlflow: Any,
        uri: str,
        name: str,
        params: Dict[str, Any],
        parent_run_id: Optional[str],
        registry_uri: Optional[str],
        caller: "Caller",
    ) -> "CallRun":
        from mlflow.entities import Param

        client = mlflow.MlflowClient(uri)
        parent = client.get_run(parent_run_id) if parent_run_id else None
        tags = {"databricks.air.version": __version__, "databricks.air.host": socket.gethostname()}
        identity = caller_identity(caller.pid)
        if identity is not None:
            tags[CALLER_TAG] = identity
        if parent is not None:
            experiment_id = parent.info.experiment_id
            tags["mlflow.parentRunId"] = parent.info.run_id
        else:
            experiment_id = _experiment_id(client, caller.name)
        try:
            run = client.create_run(experiment_id, run_name=name, tags=tags)
        except Exception as error:  # any store failure
            raise RuntimeConfigurationError(
                f"cannot create an MLflow run in {uri}: {error}. Fix the tracking store, or set "
                f"{_variables.MLFLOW}=0 to run without tracking."
            ) from error
        client.log_batch(run.info.run_id, params=[Param(key, str(value)) for key, value in params.items()])
        snapshot = base64.b64encode(run.to_proto().SerializeToString()).decode()
        opened = cls(client, run.info.run_id, experiment_id, uri, name, registry_uri=registry_uri, snapshot=snapshot)
        opened.orphan_sweep = threading.Thread(  # off the call's way: a search of the store takes its time
            target=end_orphaned_runs,
            args=(client, experiment_id, run.info.run_id),
            name="databricks.air orphaned runs",
            daemon=True,
        )
        opened.orphan_sweep.start()
        return opened

    def rank_environ(self) -> Dict[str, str]:
        """Variables that make ``mlflow.log_*`` in a process log into this run, in this store."""
        return {
            "MLFLOW_RUN_ID": self.run_id,
            "MLFLOW_TRACKING_URI": self.tracking_uri,
            "MLFLOW_EXPERIMENT_ID": self.experiment_id,
        }

    def environ_for_ranks(self, caller_environ: Mapping[str, str]) -> Dict[str, str]:
        """What the ranks of a ``.distributed()`` call get on top of ``caller_environ``: this run
        (:meth:`rank_environ`), tracking's rank side (:mod:`databricks.air._tracking.rank_side`) as a rank hook, and
        MLflow settings the caller left unset:

        * ``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS=1``: each rank hands its queued metrics on once a second
          (:mod:`databricks.air._tracking.rank_buffer`, to the call's writer when :meth:`start_metrics_writer`
          started one; MLflow's asynchronous logging batches alike, where a rank uses it), not one per point;
        * ``MLFLOW_REGISTRY_URI``: the caller's registry; left unset, MLflow looks for a Spark session (a failed
          ``import pyspark`` of about 1 ms) in every fluent call, which is most of what ``log_metric`` costs.
        """
        environ = self.rank_environ()
        environ[_variables.RANK_HOOKS] = rank_side.__name__
        if self._metrics_writer is not None:
            environ.update(self._metrics_writer.environ())
        if self.snapshot:
            environ[_variables.RUN_SNAPSHOT] = self.snapshot
        defaults = {"MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "1", "MLFLOW_REGISTRY_URI": self.registry_uri}
        environ.update({key: value for key, value in defaults.items() if value and key not in caller_environ})
        return environ

    # --- logs and the end ----------------------------------------------------------------------------------------

    def start_system_metrics(self, interval: Optional[float] = None) -> None:
        """MLflow's system metrics (CPU, memory, GPUs) of this node every ``interval`` seconds, where MLflow's
        monitor can run (needs psutil).

        The monitor runs in the caller: every rank is on this node, so it sees what a monitor in rank 0 would,
        without making each call's rank 0 import MLflow. ``DATABRICKS_AIR_SYSTEM_METRICS=0`` turns it off (a
        ``.distributed()`` call does not call this then); without ``interval``, both variables are read here.
        """
        if interval is None:  # a workload's attempt: a bad value must not end it, so the default stands in
            if switched_off(_variables.SYSTEM_METRICS):
                return
            try:
                interval = _settings.SYSTEM_METRICS_SECONDS.read(os.environ)
            except RuntimeConfigurationError as error:
                notice(f"{error}")
                interval = _settings.SYSTEM_METRICS_SECONDS.default
        if importlib.util.find_spec("psutil") is None:  # the monitor's own requirement
            return
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError:
            return
        try:
            with quiet.quiet():
                self._monitor = SystemMetricsMonitor(
                    self.run_id, sampling_interval=interval, node_id="node_0", tracking_uri=self.tracking_uri
                )
                self._monitor.start()
        except Exception as error:  # noqa: BLE001 - metrics are a nicety, never a reason to fail a call
            self._monitor = None
            notice(f"no system metrics: {error}")

    def start_metrics_writer(self) -> None:
        """Write the ranks' per-step metrics here, in the caller (:mod:`databricks.air._tracking.writer` says why);
        :meth:`environ_for_ranks` then tells the ranks where to send them."""

        def write(run_id: str, metrics: list) -> None:
            self.client.log_batch(run_id, metrics=metrics, synchronous=True)

        self._metrics_writer = writer.MetricsWriter(self.run_id, write)

    def start_log_uploads(self, log_dir: str, interval: float = DEFAULT_UPLOAD_SECONDS) -> None:
        """Upload ``rank_<r>.txt`` files every ``interval`` seconds (``DATABRICKS_AIR_LOG_UPLOAD_SECONDS``) while
        the call runs."""
        self._uploader = _LogUploader(self, log_dir, interval)
        self._uploader.start()

    def log_call_metrics(self, metrics: Dict[str, float], step: int) -> None:
        """Metrics of the call's own (the straggler watch's figures), through the call's one writer when it runs one
        (:meth:`start_metrics_writer`), else written here."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        points = [Metric(key, float(value), stamp, step) for key, value in metrics.items()]
        if self._metrics_writer is None or not self._metrics_writer.log(points):
            self.client.log_batch(self.run_id, metrics=points)

    def set_tag(self, key: str, value: str) -> None:
        self.client.set_tag(self.run_id, key, value)

    def delete_tag(self, key: str) -> None:
        self.client.delete_tag(self.run_id, key)

    def keep_snapshot(self, report: Any) -> None:
        """Attach a report of where the ranks were (a :class:`~databricks.air._engine.stop_report.StopReport`):
        its folder's files under ``snapshot/`` (a stall's under ``snapshot/stall_<n>/``), and a tag naming the
        suspect ranks."""
        name = os.path.basename(report.folder)
        artifact_path = "snapshot" if name == SNAPSHOT else f"snapshot/{name}"
        self.client.log_artifacts(self.run_id, report.folder, artifact_path=artifact_path)
        self.client.set_tag(
            self.run_id, "databricks.air.suspect_ranks", ",".join(str(rank) for rank in report.suspects) or "none"
        )

    def keep_restart(self, decision: Any, log_dir: str) -> None:
        """A restart of the call (a :class:`~databricks.air._engine.restarts.Restart`): the failed attempt's logs
        under ``logs/attempt_<n>/``, a tag per restart saying why, the count as a tag and a metric."""
        number = decision.attempt + 1
        kept = CallFolder(log_dir).attempt(decision.attempt)
        try:
            if os.path.isdir(kept):
                self.client.log_artifacts(self.run_id, kept, artifact_path=f"logs/attempt_{decision.attempt}")
            self.client.set_tag(self.run_id, "databricks.air.restarts", str(number))
            self.client.set_tag(
                self.run_id, f"databricks.air.restart_{number}", f"{decision.cause}: {decision.why}"[:_TAG_LIMIT]
            )
            self.client.log_metric(self.run_id, "restarts", number, step=number)
        except Exception as error:  # noqa: BLE001 - the store's trouble must not stop the restart
            notice(f"could not record restart {number} in the MLflow run: {error}")

    def upload_logs(self, log_dir: str) -> None:
        for path in CallFolder(log_dir).rank_logs():
            self.client.log_artifact(self.run_id, path, artifact_path="logs")

    def close(self, status: str, log_dir: Optional[str], failure: Optional[BaseException] = None) -> None:
        """Final log upload, duration, failure report; then the run's end status."""
        self.end(status, log_dir, failure_note(failure))

    def end(self, status: str, log_dir: Optional[str], failure: Optional[Tuple[str, str]]) -> None:
        """:meth:`close` with the failure as :func:`failure_note` keeps it (what crosses to the tracking host)."""
        with quiet.quiet():
            try:
                if self._metrics_writer is not None:
                    self._metrics_writer.close()  # the ranks' last points, before the run ends
            finally:
                self._close_after_metrics(status, log_dir, failure)

    def _close_after_metrics(self, status: str, log_dir: Optional[str], failure: Optional[Tuple[str, str]]) -> None:
        if self._uploader is not None:
            self._uploader.stop()
        if self._monitor is not None:
            try:
                self._monitor.finish()
            except Exception:  # noqa: BLE001
                pass
        try:
            if log_dir is not None:
                self.upload_logs(log_dir)
            self.client.log_metric(self.run_id, "duration_seconds", time.time() - self.started)
            if failure is not None:
                kind, report = failure
                self.client.set_tag(self.run_id, "databricks.air.failure", report.splitlines()[0][:_TAG_LIMIT])
                self.client.log_text(self.run_id, f"{kind}: {report}\n", "failure.txt")
        finally:
            self.client.set_terminated(self.run_id, status)


CALLER_TAG = "databricks.air.caller"
"""The tag naming a call's caller (:func:`caller_identity`), so that a later call can end the run of a caller that
was killed (``kill -9``, the out-of-memory killer) before it could: :func:`end_orphaned_runs`."""


def caller_identity(pid: int) -> Optional[str]:
    """``<pid>:<start>:<machine>`` of a process of this machine: its start time (so that a new process given the same
    pid is not taken for it) and this boot and pid namespace (pids mean nothing elsewhere); ``None`` if unknown."""
    start = _process_start(pid)
    machine = _pid_namespace()
    if start is None or machine is None:
        return None
    return f"{pid}:{start}:{machine}"


def caller_gone(identity: str) -> bool:
    """Whether the process ``identity`` names has ended; ``False`` when it cannot be told from here (another
    machine, another container, a tag of another form)."""
    try:
        pid_text, start, machine = identity.split(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if machine != _pid_namespace():
        return False
    return _process_start(pid) != start  # ended, or its pid was given to a new process


def end_orphaned_runs(client: Any, experiment_id: str, own_run_id: Optional[str] = None) -> List[str]:
    """End as KILLED the RUNNING runs of ``experiment_id`` made on this machine whose caller has ended without ending
    them; return their ids. Never raises: the next call tries again. ``own_run_id``, the sweeping call's own run, is
    left to its call: made by the tracking host, its caller may die while the sweep runs, and the host's process for
    that caller ends it, saying so."""
    host = socket.gethostname().replace("'", "")
    ended: List[str] = []
    try:
        with quiet.quiet():
            runs = client.search_runs(
                [experiment_id],
                filter_string=f"attributes.status = 'RUNNING' and tags.`databricks.air.host` = '{host}'",
                max_results=1000,
            )
            for run in runs:
                if run.info.run_id == own_run_id:
                    continue
                caller = run.data.tags.get(CALLER_TAG)
                if not caller or not caller_gone(caller):
                    continue
                pid = caller.split(":", 1)[0]
                client.set_tag(
                    run.info.run_id,
                    "databricks.air.failure",
                    f"its caller (pid {pid} on {host}) ended without ending the run (killed?); ended "
                    "as KILLED by a later call",
                )
                client.set_terminated(run.info.run_id, "KILLED")
                ended.append(run.info.run_id)
    except Exception:  # noqa: BLE001 - a store that is busy or cannot search: the next call tries again
        pass
    return ended


def process_stat(pid: int) -> Optional[List[bytes]]:
    """The fields of ``/proc/<pid>/stat`` after the command name, from the state (field 3) on; ``None`` if there is
    no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            stat = stream.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()  # the command name, in parentheses, may hold spaces


def _process_start(pid: int) -> Optional[str]:
    """When process ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``, field 22); ``None`` if there is
    no such process."""
    fields = process_stat(pid)
    return fields[19].decode() if fields is not None and len(fields) > 19 else None


def _pid_namespace() -> Optional[str]:
    """This boot and this process's pid namespace: where a pid means the same process."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as stream:
            boot = stream.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return None


class _LogUploader(threading.Thread):
    """Uploads the call's log files periodically, so they show in the MLflow UI while training runs."""

    def __init__(self, run: CallRun, log_dir: str, interval: float) -> None:
        super().__init__(name="databricks.air log uploader", daemon=True)
        self._run = run
        self._log_dir = log_dir
        self._interval = interval
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._run.upload_logs(self._log_dir)
            except Exception as error:  # noqa: BLE001 - a failed upload must not end the call
                notice(f"could not upload logs to MLflow: {error}")

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=30)


class _DeadlinePassed(Exception):
    """Raised on the thread making a call's run when the call's deadline cut a wait short."""


class _Opening:
    """A call's run being made on a thread of its own (:meth:`CallRun.open`), which the call may give up on."""

    def __init__(
        self,
        cls: Any,
        mlflow: Any,
        uri: str,
        name: str,
        params: Dict[str, Any],
        parent_run_id: Optional[str],
        registry_uri: Optional[str],
        deadline: Optional[float],
        caller: "Caller",
    ) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._run: Optional[CallRun] = None
        self._error: Optional[BaseException] = None
        self._abandoned: Optional[str] = None  # the status a run made after the call gave up on it ends with
        self._thread = threading.Thread(
            target=self._make,
            args=(cls, mlflow, uri, name, params, parent_run_id, registry_uri, deadline, caller),
            name="databricks.air MLflow run",
            daemon=True,
        )
        self._thread.start()

    def _make(self, cls: Any, *args: Any) -> None:
        run: Optional[CallRun] = None
        try:
            run = cls._open_here(*args)
        except BaseException as error:  # noqa: BLE001 - handed to the call
            self._error = error
        with self._lock:
            self._run = run
            late = self._abandoned
            self._done.set()
        if late is not None and run is not None:
            _end_abandoned(run, late)

    def result(self, deadline: Optional[float]) -> Optional["CallRun"]:
        """The run, once made; ``None`` when ``deadline`` came first (the run, if it comes, is ended FAILED, as a
        call that timed out ends its run). Raises what making it raised. An interrupt gives it up too (a run that
        comes is ended KILLED)."""
        status = "KILLED"
        try:
            self._done.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
            status = "FAILED"
        finally:
            with self._lock:
                if not self._done.is_set():
                    self._abandoned = status
        if not self._done.is_set() or isinstance(self._error, _DeadlinePassed):
            return None
        if self._error is not None:
            raise self._error
        return self._run


def _end_abandoned(run: "CallRun", status: str) -> None:
    """End a run whose call gave up waiting for it: FAILED after its timeout, KILLED after an interrupt; saying why."""
    why = "its timeout passed" if status == "FAILED" else "it was interrupted"
    try:
        with quiet.quiet():
            run.client.set_tag(
                run.run_id,
                "databricks.air.failure",
                f"the call stopped waiting for its MLflow run ({why}) before the store made it; no rank was started",
            )
            run.client.set_terminated(run.run_id, status)
    except Exception:  # noqa: BLE001 - the sweep of orphaned runs ends it once this caller is gone
        pass


def _since(began: float) -> str:
    return f"{time.monotonic() - began:.1f} s"


def _set_up_timeout(name: str, timeout: Optional[float], what: str) -> LocalExecutionTimeoutError:
    """The call's timeout, reached while its run was being made (``what`` says what it waited for)."""
    limit = f"its timeout of {timeout:g} s" if timeout is not None else "its deadline"
    return LocalExecutionTimeoutError(
        f"{name} did not finish within {limit}: {what}, so no rank was started (the timeout counts from "
        f".distributed(), its set-up included). Check the store (MLFLOW_TRACKING_URI), raise the timeout, or set "
        f"{_variables.MLFLOW}=0 to run without tracking."
    )


def _creating_store_note(uri: str) -> Optional[str]:
    """What to show while a SQLite store that does not exist yet is made, or ``None`` for any other store."""
    path = warmup.sqlite_path(uri)
    if path is None or os.path.exists(path):
        return None
    return PREFIX + f"creating the MLflow store {path} (the first call only)..."


HEALTH_CHECK_SECONDS = 5.0


def _check_reachable(uri: str, deadline: Optional[float] = None) -> None:
    """For an HTTP store, a quick health check, so that no rank starts for a run that would be lost; it waits at
    most :data:`HEALTH_CHECK_SECONDS`, and never past ``deadline`` (the call then raises its timeout)."""
    if not uri.startswith(("http://", "https://")):
        return
    seconds = HEALTH_CHECK_SECONDS
    if deadline is not None:
        seconds = min(seconds, max(0.05, deadline - time.monotonic()))
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=seconds):
            return
    except (urllib.error.URLError, OSError) as error:
        timed_out = isinstance(error, TimeoutError) or isinstance(getattr(error, "reason", None), TimeoutError)
        if timed_out and seconds < HEALTH_CHECK_SECONDS:
            raise _DeadlinePassed() from None  # cut short by the call's timeout, which the call says
        reason = getattr(error, "reason", error)
        raise RuntimeConfigurationError(
            f"the MLflow tracking server {uri} cannot be reached ({reason}). Start it or point "
            f"MLFLOW_TRACKING_URI elsewhere, or set {_variables.MLFLOW}=0 to run without tracking."
        ) from None


def _experiment_id(client: Any, caller_name: Optional[str]) -> str:
    """The experiment for a top-level run (see the module docstring for the order); ``caller_name``: the caller's
    notebook or script name (:func:`notebook_or_script_name` in the caller)."""
    from mlflow.tracking import fluent

    chosen = getattr(fluent, "_active_experiment_id", None)  # set by mlflow.set_experiment in this process
    if chosen:
        return str(chosen)
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    if name:
        return _get_or_create(client, name)
    if os.environ.get("MLFLOW_EXPERIMENT_ID"):
        return os.environ["MLFLOW_EXPERIMENT_ID"]
    if caller_name:
        return _get_or_create(client, caller_name)
    return "0"  # MLflow's default experiment


def _get_or_create(client: Any, name: str) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return str(experiment.experiment_id)
    try:
        return str(client.create_experiment(name))
    except Exception:  # created meanwhile by another process
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return str(experiment.experiment_id)


def notebook_or_script_name() -> Optional[str]:
    """The running notebook's or script's name (without extension), where the environment says."""
    session = os.environ.get("JPY_SESSION_NAME") or getattr(sys.modules.get("__main__"), "__session__", None)
    if session:
        return os.path.splitext(os.path.basename(str(session)))[0] or None
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file and not _notebook.in_jupyter_kernel():
        return os.path.splitext(os.path.basename(main_file))[0] or None
    return None
