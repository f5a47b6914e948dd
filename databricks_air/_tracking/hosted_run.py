"""A call's MLflow run kept by the tracking host (:mod:`.tracking_host`), seen from the caller.

A script's call uses the host when it would otherwise import MLflow first (:func:`.host_start.preferred` says when);
decoration starts the host, if none runs (:mod:`.host_start`); the call then connects (:func:`open_run`) and gets a
:class:`HostedRun`, whose methods are :class:`~databricks.air._tracking.call_run.CallRun`'s, done by the host's child
for this caller. If the host cannot be started or reached, the call makes its run here, as without a host.

Example::

    if host_start.preferred():
        run = hosted_run.open_run(name, params, deadline=deadline, timeout=timeout, started=started)
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from databricks.air import _settings
from databricks.air._tracking.host_start import LOG, SOCKET, folder, host_running, preferred, start_host
from databricks.air._tracking.call_run import Caller, RunView, failure_note
from databricks.air._notices import notice

START_SECONDS = 60.0
"""How long a call waits for a host that is starting (importing MLflow) when its own timeout allows more: a host
that takes longer is taken for broken, and the call makes its run itself."""
_ANSWER_MARGIN_SECONDS = 1.0
"""How long past the call's deadline the caller waits for the host's answer to ``open``: the host's child gives up at
the deadline and says what it waited for."""


class HostUnavailable(Exception):
    """The host could not be started or reached, or went away before it made the run: the call makes it itself."""


def _connect(deadline: Optional[float]) -> socket.socket:
    """A connection to this interpreter's host, started if need be; waits for it within ``deadline`` and
    :data:`START_SECONDS`. :class:`HostUnavailable` if it does not come; a timeout error is the caller's to raise."""
    where = folder()
    path = os.path.join(where, SOCKET)
    limit = time.monotonic() + START_SECONDS
    if deadline is not None:
        limit = min(limit, deadline)
    asked: Optional[float] = None  # when this call made sure a host was starting
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.connect(path)
            return connection
        except (FileNotFoundError, ConnectionRefusedError):
            connection.close()
        now = time.monotonic()
        if asked is None:
            start_host()  # none runs (or one is starting: then this does nothing)
            asked = now
        elif now - asked > _DEAD_AFTER_SECONDS and not host_running(where):  # it started, and ended unheard
            raise HostUnavailable(f"the tracking host ended as it started (see {os.path.join(where, LOG)})")
        if now >= limit:
            raise HostUnavailable(f"the tracking host did not start (see {os.path.join(where, LOG)})")
        time.sleep(0.01)


_DEAD_AFTER_SECONDS = 5.0
"""How long a host may take to take its lock (a fresh interpreter's start) before a free lock means it died."""


def _answered(answer: Optional[Dict[str, Any]], fds: List[int], gone: BaseException) -> Dict[str, Any]:
    """A host's answer: ``gone`` raised at EOF, the host's error raised as it was (class kept); descriptors closed."""
    for fd in fds:
        os.close(fd)
    if answer is None:
        raise gone
    if answer["op"] == "error":
        raise answer["error"]
    return answer


class HostedRun(RunView):
    """A call's run made and kept by the tracking host: the methods of
    :class:`~databricks.air._tracking.call_run.CallRun` that a call uses, each done there."""

    def __init__(self, connection: socket.socket, name: str, names: Dict[str, Any]) -> None:
        self._connection = connection
        self._lock = threading.Lock()  # the straggler watch's thread and the call's share the connection
        self.name = name
        self.run_id = names["run_id"]
        self.experiment_id = names["experiment_id"]
        self.tracking_uri = names["tracking_uri"]
        self.registry_uri = names["registry_uri"]

    def _ask(self, method: str, *args: Any, **kwargs: Any) -> Any:
        from databricks.air._engine.rank_server import receive, send

        with self._lock:
            try:
                send(self._connection, {"op": "call", "method": method, "args": args, "kwargs": kwargs})
                answer, fds = receive(self._connection)
            except OSError as error:
                raise RuntimeError(f"the tracking host's process for this call is gone ({error})") from None
        return _answered(answer, fds, RuntimeError("the tracking host's process for this call is gone"))["value"]

    def environ_for_ranks(self, caller_environ: Any) -> Dict[str, str]:
        environ: Dict[str, str] = self._ask("environ_for_ranks", dict(caller_environ))
        return environ

    def start_metrics_writer(self) -> None:
        self._ask("start_metrics_writer")

    def start_log_uploads(self, log_dir: str, interval: float = _settings.LOG_UPLOAD_SECONDS.default) -> None:
        self._ask("start_log_uploads", log_dir, interval)

    def start_system_metrics(self, interval: Optional[float] = None) -> None:
        self._ask("start_system_metrics", interval)

    def log_call_metrics(self, metrics: Dict[str, float], step: int) -> None:
        self._ask("log_call_metrics", dict(metrics), step)

    def set_tag(self, key: str, value: str) -> None:
        self._ask("set_tag", key, value)

    def delete_tag(self, key: str) -> None:
        self._ask("delete_tag", key)

    def keep_snapshot(self, report: Any) -> None:
        from types import SimpleNamespace

        self._ask("keep_snapshot", SimpleNamespace(folder=report.folder, suspects=list(report.suspects)))

    def keep_restart(self, decision: Any, log_dir: str) -> None:
        self._ask("keep_restart", decision, log_dir)

    def upload_logs(self, log_dir: str) -> None:
        self._ask("upload_logs", log_dir)

    def close(self, status: str, log_dir: Optional[str], failure: Optional[BaseException] = None) -> None:
        """The run's end (see ``CallRun.close``); the host's process for this call ends with it."""
        try:
            self._ask("end", status, log_dir, failure_note(failure))
        finally:
            self._connection.close()


def open_run(
    name: str,
    params: Dict[str, Any],
    *,
    deadline: Optional[float],
    timeout: Optional[float],
    started: Optional[float],
) -> HostedRun:
    """The call's run, made by the tracking host (see ``CallRun.open`` for the arguments and the errors: the same,
    raised here); :class:`HostUnavailable` when there is no host to make it."""
    from databricks.air._engine.rank_server import receive, send
    from databricks.air._tracking import call_run

    connection = _connect(deadline)
    try:
        umask = os.umask(0)
        os.umask(umask)
        request = {
            "op": "open",
            "environ": dict(os.environ),
            "cwd": os.getcwd(),
            "umask": umask,
            "caller": Caller.this_process(),
            "name": name,
            "params": params,
            "deadline": deadline,
            "timeout": timeout,
            "started": started,
        }
        try:
            send(connection, request, [sys.stdout.fileno(), sys.stderr.fileno()])
        except (OSError, ValueError) as error:  # the host went away meanwhile; streams without descriptors
            raise HostUnavailable(f"the tracking host could not be asked: {error}") from None
        if deadline is not None:
            connection.settimeout(max(0.001, deadline + _ANSWER_MARGIN_SECONDS - time.monotonic()))
        try:
            answer, fds = receive(connection)
        except socket.timeout:
            raise call_run._set_up_timeout(name, timeout, "the tracking host did not make the MLflow run in time")
        except KeyboardInterrupt:
            raise KeyboardInterrupt("interrupted while opening the MLflow run; no rank was started") from None
        except OSError as error:
            raise HostUnavailable(f"the tracking host's connection broke: {error}") from None
        finally:
            connection.settimeout(None)
        answer = _answered(answer, fds, HostUnavailable("the tracking host ended before it made the run"))
        return HostedRun(connection, name, answer["run"])
    except BaseException:
        connection.close()  # the host's process for this call ends any run it made (KILLED)
        raise


def open_call_run(
    name: str,
    params: Dict[str, Any],
    *,
    parent_run_id: Optional[str],
    deadline: Optional[float],
    timeout: Optional[float],
    started: Optional[float],
) -> Any:
    """A ``.distributed()`` call's run: made by the tracking host where :func:`preferred` (a :class:`HostedRun`),
    else here (a :class:`~databricks.air._tracking.call_run.CallRun`), with the same methods and errors."""
    from databricks.air._tracking import call_run

    if parent_run_id is None and preferred():
        for attempt in range(2):  # a host that has just reached its idle time closes the connections it holds
            try:
                return open_run(name, params, deadline=deadline, timeout=timeout, started=started)
            except HostUnavailable as error:
                if deadline is not None and time.monotonic() >= deadline:
                    began = started if started is not None else deadline
                    raise call_run._set_up_timeout(
                        name,
                        timeout,
                        f"the tracking host (which imports MLflow) was not ready within {call_run._since(began)}",
                    ) from None
                if attempt == 1:
                    _fall_back_notice(error)
    return call_run.CallRun.open(
        name, params, parent_run_id=parent_run_id, deadline=deadline, timeout=timeout, started=started
    )


def _fall_back_notice(error: HostUnavailable) -> None:
    """Said once per process: a call makes its run itself for want of a host."""
    global _said
    if not _said:
        _said = True
        notice(f"{error}; this call imports MLflow itself")


_said = False
