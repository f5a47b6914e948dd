"""The caller's side of the rank server: starting it, talking to it, and keeping idle ones for the next call.

One server serves one call at a time; a finished call hands its server back to a small per-process pool, so a
later call in the same notebook skips the interpreter start and the torch import. A server is reused only by the
process that started it, with the same interpreter and the same start-up environment (variables that libraries
read once at import, such as ``OMP_*`` or ``LD_PRELOAD``, cannot change inside a running server).
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import weakref
from typing import Dict, List, Optional, Tuple

from databricks.air import _variables
from databricks.air._engine import rank_server
from databricks.air._engine.processes import python_command
from databricks.air.exceptions import RuntimeConfigurationError

# Environment variables read when an interpreter or a native library starts (or, ours, when the server starts);
# a server started under other values is not reused.
_STARTUP_VARIABLE_PREFIXES = (
    "PYTHON", "LD_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "MALLOC_", "TORCH_", "PYTORCH_", "CUDA_", "NCCL_",
    _variables.PRELOAD, _variables.MLFLOW,
)
_START_TIMEOUT_SECONDS = 300.0


def startup_fingerprint(environ: Dict[str, str]) -> Tuple:
    """What a server's usefulness depends on: the interpreter and the start-up variables."""
    startup = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(_STARTUP_VARIABLE_PREFIXES)))
    return (sys.executable, os.getpid(), startup)


class RankServerHandle:
    """A running rank server, seen from the caller."""

    def __init__(self, environ: Dict[str, str]) -> None:
        self.fingerprint = startup_fingerprint(environ)
        self.socket, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                python_command(rank_server.__name__, [str(server_end.fileno())]),
                pass_fds=[server_end.fileno()],
                env=environ,
                stdin=subprocess.DEVNULL,
                # Not the caller's streams: a server outlives calls, and whoever reads the caller's output
                # (a pipe, a CI log) must see EOF when the caller exits. Problems come back in "ready".
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to the caller's process group must not kill it mid-teardown
                close_fds=True,
            )
        finally:
            server_end.close()
        self.ready = False
        self.unsettled = False
        """A request went unanswered: an answer may still come, so the server serves no other call."""
        self._backlog: List[dict] = []
        _live_handles.add(self)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self) -> None:
        """Block until the server has preloaded torch; raise if it died instead."""
        if self.ready:
            return
        self.socket.settimeout(_START_TIMEOUT_SECONDS)
        try:
            message = self.receive()
        except socket.timeout:
            message = None
        finally:
            self.socket.settimeout(None)
        if message is None or message.get("op") != "ready":
            self.close()
            raise RuntimeConfigurationError(
                f"the databricks.air rank server ({sys.executable}) did not start. Check that this interpreter "
                "can `import databricks.air` and `import torch`."
            )
        for problem in message.get("problems", []):
            print(f"databricks.air rank server: {problem}", file=sys.stderr)
        self.ready = True

    def notify(self, message: dict) -> None:
        """Send a message that has no answer (queued until the server reads it, even while it starts)."""
        try:
            rank_server.send(self.socket, message)
        except OSError:
            pass  # a dead server is reported by wait_ready

    def request(self, message: dict, fds: Optional[List[int]] = None) -> dict:
        """Send a request and return its answer; exit notices that arrive first are kept for :meth:`events`.

        A request that does not get its answer (an interrupt while waiting) leaves that answer on its way: the
        handle is then :attr:`unsettled`, and the pool never lends it again (the next request would read it)."""
        self.unsettled = True
        rank_server.send(self.socket, message, fds)
        while True:
            answer = self.receive()
            if answer is None:
                raise ConnectionError("the databricks.air rank server exited unexpectedly")
            if answer["op"] == "exit":
                self._backlog.append(answer)
                continue
            self.unsettled = False
            return answer

    def receive(self) -> Optional[dict]:
        message, fds = rank_server.receive(self.socket)
        for fd in fds:
            os.close(fd)
        return message

    def take_backlog(self) -> List[dict]:
        backlog, self._backlog = self._backlog, []
        return backlog

    def close(self, wait: bool = True) -> None:
        """Stop the server: closing the socket makes it kill what it started and exit.

        ``wait=False`` (at interpreter exit) does not wait for the server to unload torch and go.
        """
        try:
            self.socket.close()
        finally:
            if wait:
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()


_live_handles: "weakref.WeakSet[RankServerHandle]" = weakref.WeakSet()


def _forget_servers_in_forked_child() -> None:
    # A fork of the caller (a DataLoader worker, say) inherits the control sockets. Its copies must go, or a
    # server would not see EOF when the caller dies, and could not clean up its ranks.
    for handle in list(_live_handles):
        try:
            handle.socket.close()
        except OSError:
            pass
    _live_handles.clear()
    pool.forget()


class _Pool:
    """Idle servers of this process, keyed by start-up fingerprint (at most ``MAX_IDLE`` each)."""

    MAX_IDLE = 2

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: Dict[Tuple, List[RankServerHandle]] = {}

    def acquire(self, environ: Dict[str, str]) -> RankServerHandle:
        key = startup_fingerprint(environ)
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                handle = idle.pop()
                if handle.alive():
                    return handle
                handle.close()
        return RankServerHandle(environ)

    def prewarm(self, environ: Dict[str, str]) -> None:
        """Start a server for ``environ`` now, if none is idle, so that a call soon after finds it warm."""
        key = startup_fingerprint(environ)
        with self._lock:
            if any(handle.alive() for handle in self._idle.get(key, [])):
                return
        self.release(RankServerHandle(environ))

    def release(self, handle: RankServerHandle) -> None:
        if handle.unsettled or not handle.alive() or handle.fingerprint[1] != os.getpid():
            handle.close()
            return
        with self._lock:
            idle = self._idle.setdefault(handle.fingerprint, [])
            if len(idle) < self.MAX_IDLE:
                idle.append(handle)
                return
        handle.close()

    def forget(self) -> None:
        """Drop every idle handle without touching the servers (they belong to another process)."""
        self._lock = threading.Lock()
        self._idle = {}

    def close_all(self, wait: bool = True) -> None:
        with self._lock:
            handles = [h for idle in self._idle.values() for h in idle]
            self._idle.clear()
        for handle in handles:
            handle.close(wait=wait)


pool = _Pool()
atexit.register(pool.close_all, wait=False)
os.register_at_fork(after_in_child=_forget_servers_in_forked_child)

