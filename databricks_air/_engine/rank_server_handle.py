"""The caller's side of the rank server: starting it, talking to it, and keeping idle ones for the next call.

One server serves one call at a time; a finished call hands its server back to a per-process pool, so a later call
in the same notebook skips the interpreter start and the torch import. Calls may run at once (from threads): the
pool keeps as many idle servers as calls ran at once lately (up to :data:`MAX_IDLE`), so a round of concurrent
calls is as warm as a single one; those beyond :data:`KEEP_IDLE` go after :data:`IDLE_EXPIRY_SECONDS` unused. A
server is reused only by the process that started it, with the same interpreter and the same start-up environment
(variables that libraries read once at import, such as ``OMP_*`` or ``LD_PRELOAD``, cannot change inside a running
server).
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from typing import Dict, List, Optional, Set, Tuple

from databricks.air import _variables
from databricks.air._engine import rank_server
from databricks.air._engine.processes import python_command
from databricks.air.exceptions import RuntimeConfigurationError

# Environment variables read when an interpreter or a native library starts (or, ours, when the server starts);
# a server started under other values is not reused.
_STARTUP_VARIABLE_PREFIXES = (
    "PYTHON",
    "LD_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GOMP_",
    "OPENBLAS_",
    "MALLOC_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "NCCL_",
    # Read when torch._dynamo and inductor's configuration are imported, which a server does once its ranks use
    # them (learned_imports).
    "TORCHDYNAMO_",
    "TORCHINDUCTOR_",
    "INDUCTOR_",
    "AOT_INDUCTOR_",
    "AOTINDUCTOR_",
    "TRITON_",
    _variables.PRELOAD,
    _variables.MLFLOW,
)
_START_TIMEOUT_SECONDS = 300.0


def startup_fingerprint(environ: Dict[str, str]) -> Tuple:
    """What a server's usefulness depends on: the interpreter and the start-up variables."""
    startup = tuple(sorted((k, v) for k, v in environ.items() if k.startswith(_STARTUP_VARIABLE_PREFIXES)))
    return (sys.executable, os.getpid(), startup)


class RankServerHandle:
    """A running rank server, seen from the caller."""

    def __init__(self, environ: Dict[str, str], call_coming: bool = True) -> None:
        """Start a server for ``environ``; ``call_coming``: for a call that is getting ready now (not a spare), so
        the server leaves its deferred imports until that call's ranks have run (``RankServer.serve``)."""
        self.fingerprint = startup_fingerprint(environ)
        self.socket, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        arguments = [str(server_end.fileno())] + ([rank_server.CALL_COMING] if call_coming else [])
        try:
            self.process = subprocess.Popen(
                python_command(rank_server.__name__, arguments),
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

    def wait_ready(self, deadline: Optional[float] = None) -> bool:
        """Block until the server has preloaded torch; raise if it died instead. ``deadline`` (``time.monotonic()``):
        the call's; ``False`` if it came first (the server goes on starting, and a later call may use it)."""
        if self.ready:
            return True
        seconds, cut_short = _START_TIMEOUT_SECONDS, False
        if deadline is not None and deadline - time.monotonic() < seconds:
            seconds, cut_short = max(0.001, deadline - time.monotonic()), True
        self.socket.settimeout(seconds)
        try:
            message = self.receive()
        except socket.timeout:
            if cut_short:
                return False
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
        return True

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


KEEP_IDLE = 2
"""Idle servers kept per start-up environment however long they wait: the next call, one at a time, finds one."""
MAX_IDLE = 8
"""At most this many idle servers per start-up environment (each holds torch: 300 to 500 MB)."""
IDLE_EXPIRY_SECONDS = 300.0
"""An idle server beyond the :data:`KEEP_IDLE` most recently used is closed once it has waited this long; and a
concurrency this old no longer counts as recent (see :meth:`_Pool.acquire`)."""


class _Idle:
    __slots__ = ("handle", "since")

    def __init__(self, handle: RankServerHandle, since: float) -> None:
        self.handle = handle
        self.since = since


class _Pool:
    """The servers of this process, keyed by start-up fingerprint: the idle ones, and how many are lent to calls.

    Calls may come from several threads at once (``fn.submit``): every change of state is made under one lock, and
    a server is lent to one call at a time. A finished call's server stays idle for the next call, up to
    :data:`MAX_IDLE` per fingerprint, so that a round of K calls at once leaves K warm servers for the next round.
    The most recently used idle server is lent first, so that the ones beyond what calls need at once stay idle:
    those beyond the :data:`KEEP_IDLE` most recent are closed after :data:`IDLE_EXPIRY_SECONDS` idle (a thread
    of the pool's wakes for it only while there are any).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle: Dict[Tuple, List[_Idle]] = {}
        """Per fingerprint, oldest first: a call takes the last (the most recently used), expiry the first."""
        self._lent: Set[RankServerHandle] = set()
        self._lent_count: Dict[Tuple, int] = {}
        """Per fingerprint: how many servers are lent to calls (counted before a new one has started)."""
        self._reached: Dict[Tuple, Dict[int, float]] = {}
        """Per fingerprint: how many servers were lent at once, and when that count was last reached."""
        self._expiry: Optional[threading.Thread] = None
        self.servers_started = 0
        """How many servers this pool has started (each a fresh interpreter importing torch): for tests and
        benchmarks."""

    # --- lending -------------------------------------------------------------------------------------------------

    def acquire(self, environ: Dict[str, str]) -> RankServerHandle:
        """A server for ``environ``, lent to the caller alone until :meth:`release`: an idle one (the most recently
        used), else a new one (not ready yet: see :meth:`RankServerHandle.wait_ready`).

        A call that takes the last idle server while fewer are lent than at the recent peak (within
        :data:`IDLE_EXPIRY_SECONDS`) also starts a spare one: calls came in rounds of that size lately, and the
        next call of this round should find a server that started early."""
        key = startup_fingerprint(environ)
        dead: List[RankServerHandle] = []
        handle: Optional[RankServerHandle] = None
        with self._lock:
            idle = self._idle.get(key, [])
            while idle and handle is None:
                candidate = idle.pop().handle
                if candidate.alive():
                    handle = candidate
                else:
                    dead.append(candidate)
            lent_now = self._lent_count.get(key, 0) + 1
            self._lent_count[key] = lent_now
            if handle is not None:
                self._lent.add(handle)
            else:
                self.servers_started += 1
            now = time.monotonic()
            reached = self._reached.setdefault(key, {})
            reached[lent_now] = now
            recent_peak = max(count for count, at in reached.items() if now - at < IDLE_EXPIRY_SECONDS)
            spare = not idle and lent_now < min(recent_peak, MAX_IDLE)
            if spare:
                self.servers_started += 1
        for gone in dead:
            gone.close()
        if handle is None:
            try:
                handle = RankServerHandle(environ)
            except BaseException:
                with self._lock:
                    self._lent_count[key] -= 1
                raise
            with self._lock:
                self._lent.add(handle)
        if spare:
            try:
                self._keep_idle(RankServerHandle(environ, call_coming=False))
            except OSError:
                pass  # no spare (out of memory or processes): the call has its server, and the next makes its own
        return handle

    def prewarm(self, environ: Dict[str, str]) -> None:
        """Start a server for ``environ`` now, if none is idle, so that a call soon after finds it warm."""
        key = startup_fingerprint(environ)
        with self._lock:
            if any(entry.handle.alive() for entry in self._idle.get(key, [])):
                return
            self.servers_started += 1
        self._keep_idle(RankServerHandle(environ))

    def release(self, handle: RankServerHandle) -> None:
        """Take back a server a call is done with: kept idle for the next call, or closed."""
        with self._lock:
            if handle in self._lent:
                self._lent.discard(handle)
                self._lent_count[handle.fingerprint] -= 1
        if handle.unsettled or not handle.alive() or handle.fingerprint[1] != os.getpid():
            handle.close()
            return
        self._keep_idle(handle)

    def _keep_idle(self, handle: RankServerHandle) -> None:
        with self._lock:
            idle = self._idle.setdefault(handle.fingerprint, [])
            if len(idle) < MAX_IDLE:
                idle.append(_Idle(handle, time.monotonic()))
                if len(idle) > KEEP_IDLE:
                    self._watch_expiry()
                return
        handle.close()

    # --- idle expiry ---------------------------------------------------------------------------------------------

    def _watch_expiry(self) -> None:
        """Make sure the expiry thread runs (called under the lock, with more than :data:`KEEP_IDLE` idle)."""
        if self._expiry is not None:
            self._wake.notify()  # it may sleep until a later expiry than this server's
            return
        expiry = threading.Thread(
            target=self._expire, args=(self._wake,), name="databricks.air rank server expiry", daemon=True
        )
        try:
            expiry.start()
        except RuntimeError:  # the interpreter is shutting down: the servers go with it
            return
        self._expiry = expiry

    def _expire(self, wake: threading.Condition) -> None:
        """Close idle servers beyond the :data:`KEEP_IDLE` most recent of their fingerprint once they have waited
        :data:`IDLE_EXPIRY_SECONDS`; end when none is beyond it."""
        while True:
            expired: List[RankServerHandle] = []
            with wake:
                if wake is not self._wake:  # the pool was forgotten (a fork's copy): its state is not ours
                    return
                now = time.monotonic()
                next_expiry: Optional[float] = None
                for idle in self._idle.values():
                    while len(idle) > KEEP_IDLE and now - idle[0].since >= IDLE_EXPIRY_SECONDS:
                        expired.append(idle.pop(0).handle)
                    if len(idle) > KEEP_IDLE:
                        expiry = idle[0].since + IDLE_EXPIRY_SECONDS
                        next_expiry = expiry if next_expiry is None else min(next_expiry, expiry)
                if next_expiry is None and not expired:
                    self._expiry = None
                    return
                if not expired:
                    assert next_expiry is not None
                    wake.wait(max(0.0, next_expiry - now))
                    continue
            for handle in expired:  # outside the lock: a server takes a moment to go
                handle.close()

    # --- the end -------------------------------------------------------------------------------------------------

    def forget(self) -> None:
        """Drop every handle without touching the servers (they belong to another process)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._idle = {}
        self._lent = set()
        self._lent_count = {}
        self._reached = {}
        self._expiry = None

    def close_all(self, wait: bool = True) -> None:
        """Close every idle server (one lent to a call comes back when the call ends, and is kept idle again)."""
        with self._lock:
            handles = [entry.handle for idle in self._idle.values() for entry in idle]
            self._idle.clear()
            self._reached.clear()
            self._wake.notify()
        for handle in handles:
            handle.close(wait=wait)


pool = _Pool()
atexit.register(pool.close_all, wait=False)
os.register_at_fork(after_in_child=_forget_servers_in_forked_child)
