"""The tracking host: a process of this user's that keeps MLflow imported, and makes and keeps the runs of scripts'
calls, so that a script's first tracked call does not import MLflow itself.

Why: importing MLflow and its SQL store takes 2 to 2.5 s of one core (``import mlflow`` alone brings in pandas,
pyarrow and FastAPI: 1,800 modules), against about 1 s for the rank server's ``import torch``; a script that imports
``databricks.air`` and calls at once waits for it, however early it starts (:mod:`.warmup`). A host started by an
earlier script has done it already. The first script of a session starts the host (at decoration) and waits for it
as it would for its own import; every script after it, until the host has been idle for
``DATABRICKS_AIR_TRACKING_HOST_IDLE_SECONDS`` (600 by default), finds it ready. ``DATABRICKS_AIR_TRACKING_HOST=0``:
no host, MLflow imported in the caller as before. Which calls use it: :mod:`.hosted_run`.

How: like the rank server (``_engine/rank_server.py``), a fork server. The host imports MLflow, then listens on a
Unix socket in this user's private folder (``<temp>/databricks-air-<uid>/tracking/<fingerprint>/``, 0700: see
``_engine/user_folder.py``; a peer of another uid is refused too). Each caller that connects gets a child forked for
it: a fresh copy of the host, MLflow loaded and no store opened, that takes the caller's environment, working
directory, umask, stdout and stderr, makes the call's run exactly as the caller would
(:meth:`~databricks.air._tracking.call_run.CallRun.open`) and then does what the caller asks of the run (its
metrics writer, log uploads, system metrics, tags, the end). It lives as long as the call's connection: a caller that
dies without ending its run (``kill -9``) leaves its child an EOF, and the run is ended KILLED, saying so. A forked
child shares nothing with other callers' (MLflow's per-process state, the store's engine, the working directory).

Protocol (``AF_UNIX``/``SOCK_SEQPACKET``, a pickled dict a message, as the rank server's):

* caller → child ``{"op": "open", "environ", "cwd", "umask", "caller", "name", "params", "deadline", "timeout",
  "started"}`` + ``[stdout, stderr]``; answered ``{"op": "opened", "run": {...}}`` (the run's names) or
  ``{"op": "error", "error"}`` (the exception, its class kept: a timeout is the call's
  :class:`~databricks.air.exceptions.LocalExecutionTimeoutError`);
* caller → child ``{"op": "call", "method", "args", "kwargs"}`` (one of :data:`METHODS`); answered
  ``{"op": "result", "value"}`` or ``{"op": "error", "error"}``; after ``end`` the child exits.

Only one host runs per folder: it holds an exclusive lock on ``host.lock`` from before its imports until it exits
(a second one started meanwhile sees the lock taken and exits at once), and its stderr goes to ``host.log`` there.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time
from typing import Any, Dict, Tuple

from databricks.air import _settings
from databricks.air._engine.rank_server import receive, send
from databricks.air._tracking.host_start import PID, SOCKET, host_running, take_lock

METHODS = frozenset(
    {
        "environ_for_ranks",
        "start_metrics_writer",
        "start_log_uploads",
        "start_system_metrics",
        "log_call_metrics",
        "set_tag",
        "delete_tag",
        "keep_snapshot",
        "keep_restart",
        "upload_logs",
        "end",
    }
)
"""What a caller may ask of its run (:class:`~databricks.air._tracking.call_run.CallRun`'s methods)."""


def main() -> None:
    """``python -c ... tracking_host <folder>`` (see :func:`databricks.air._tracking.hosted_run.start_host`)."""
    folder = sys.argv[1]
    lock = take_lock(folder)
    if lock is None:
        return  # another host runs, or is starting
    from databricks.air._engine.frozen_imports import frozen_imports
    from databricks.air._tracking import warmup

    with frozen_imports():  # this process is ours alone, and MLflow is what it keeps
        warmup.start(open_store=False, hosted=False)
        warmup.wait(None)
    if not warmup.imported():
        print("databricks.air tracking host: MLflow could not be imported; calls import it themselves", file=sys.stderr)
        return
    idle = _settings.TRACKING_HOST_IDLE_SECONDS.read(os.environ)
    path = os.path.join(folder, SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        os.unlink(path)  # a host that ended without removing it (we hold the lock: it is not running)
    except FileNotFoundError:
        pass
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(64)
    with open(os.path.join(folder, PID), "w") as pid_file:
        pid_file.write(f"{os.getpid()}\n")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel; the host never waits
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the terminal that started a script is not for us
    listener.settimeout(idle)
    bound = os.stat(path).st_ino
    try:
        while True:
            try:
                connection, _ = listener.accept()
            except socket.timeout:
                return  # idle for long enough
            if not _same_user(connection):
                connection.close()
                continue
            if os.fork() == 0:
                listener.close()
                os.close(lock)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                code = 0
                try:
                    serve(connection)
                except BaseException:  # noqa: BLE001 - the child's last word goes to its caller's stderr
                    import traceback

                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            connection.close()
    finally:
        try:
            if os.stat(path).st_ino == bound:  # not a later host's socket
                os.unlink(path)
        except FileNotFoundError:
            pass
        listener.close()


def stop(folder: str, timeout: float = 10.0) -> bool:
    """Stop ``folder``'s host, if one runs (its callers' processes go on to their calls' ends); whether none runs
    now."""
    try:
        with open(os.path.join(folder, PID)) as pid_file:
            pid = int(pid_file.read().strip() or 0)
    except (OSError, ValueError):
        pid = 0
    if not host_running(folder):
        return True
    if pid > 0:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not host_running(folder):
            return True
        time.sleep(0.02)
    return False


def _same_user(connection: socket.socket) -> bool:
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid()


def serve(connection: socket.socket) -> None:
    """One caller's run, in the child forked for it."""
    message, fds = receive(connection)
    if message is None or message.get("op") != "open" or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return
    for fd, target in zip(fds, (1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(message["environ"])
    os.chdir(message["cwd"])
    os.umask(message["umask"])
    from databricks.air._tracking.call_run import CallRun

    try:
        run = CallRun.open(
            message["name"],
            message["params"],
            deadline=message["deadline"],
            timeout=message["timeout"],
            started=message["started"],
            caller=message["caller"],
        )
    except BaseException as error:  # noqa: BLE001 - the caller raises it
        _answer(connection, {"op": "error", "error": portable(error)})
        return
    caller_pid = message["caller"].pid
    names = {"run_id": run.run_id, "experiment_id": run.experiment_id, "tracking_uri": run.tracking_uri}
    if not _answer(connection, {"op": "opened", "run": dict(names, registry_uri=run.registry_uri)}):
        run.end("KILLED", None, _caller_left(caller_pid))
        return
    ended = False
    while not ended:
        try:
            request, extra = receive(connection)
        except OSError:  # reset: the caller died with an answer of ours unread
            request, extra = None, []
        for fd in extra:
            os.close(fd)
        if request is None:
            run.end("KILLED", None, _caller_left(caller_pid))
            return
        method = request.get("method")
        if request.get("op") != "call" or method not in METHODS:
            answer: Dict[str, Any] = {"op": "error", "error": ValueError(f"not a method of a call's run: {method!r}")}
        else:
            try:
                answer = {"op": "result", "value": getattr(run, method)(*request["args"], **request["kwargs"])}
            except BaseException as error:  # noqa: BLE001 - the caller raises it
                answer = {"op": "error", "error": portable(error)}
        ended = method == "end"
        if not _answer(connection, answer) and not ended:
            run.end("KILLED", None, _caller_left(caller_pid))
            return


def _caller_left(pid: int) -> Tuple[str, str]:
    """Why a run ends KILLED when its caller's connection ends before the call ended the run."""
    from databricks.air._tracking.call_run import process_stat

    fields = process_stat(pid)
    # Gone, a zombie its parent has not waited for yet, or on its way out: a process's sockets close while it exits
    # (PF_EXITING, 0x4 in its flags, is set first), before it becomes a zombie.
    if fields is None or fields[0] in (b"Z", b"X") or int(fields[6]) & 0x4:
        return "CallerGone", f"its caller (pid {pid}) ended without ending the run (killed?)"
    return "CallerGone", f"its caller (pid {pid}) stopped waiting for it (interrupted?)"


def _answer(connection: socket.socket, message: Dict[str, Any]) -> bool:
    try:
        send(connection, message)
    except OSError:
        return False
    except Exception:  # noqa: BLE001 - an answer that cannot be pickled: its text instead
        error = message.get("error") or message.get("value")
        send(connection, {"op": "error", "error": RuntimeError(f"{type(error).__name__}: {error}")})
    return True


def portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling (its class, message and attributes), else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(error).__name__}: {error}")
