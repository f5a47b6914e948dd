"""The rank server: a fresh interpreter, started by the caller, that imports torch once and forks ranks from it.

Why: a fresh ``python`` that imports torch costs about 1.4 s, per rank, per call. Forking the *caller* would be
instant but unsafe (a notebook may have initialised CUDA, and ranks would re-run nothing of its state cleanly).
The server is a clean interpreter that imported torch without touching CUDA, so a forked rank is as good as a new
interpreter and starts in milliseconds. It is the same idea as ``multiprocessing``'s forkserver, but the server
also owns the ranks' lifecycle: each rank gets its own session (so its whole process tree can be signalled),
``PR_SET_PDEATHSIG``, and the caller's stdout/stderr pipes; and when the caller goes away (the control socket
reaches EOF, even after a SIGKILL) the server kills every rank's process group before it exits.

Protocol: one ``AF_UNIX``/``SOCK_SEQPACKET`` socket; each message is a pickled dict, with file descriptors
attached where noted.

* caller → server ``{"op": "spawn", "call_dir", "ranks", "exec"}`` + ``[stdout, stderr]`` write ends per rank;
  answered by ``{"op": "spawned", "pids"}``.
* caller → server ``{"op": "store", "host", "world_size", "port", "timeout"}``: fork a process hosting the
  rendezvous ``TCPStore`` on ``host`` only (``MASTER_ADDR``); answered by ``{"op": "store", "pid", "port"}`` or
  ``{"op": "error", "message"}``.
* caller → server ``{"op": "adopt", "call_dir"}`` (no answer): the server removes that private call directory if
  the caller dies before it could (a SIGKILL skips the caller's own clean-up).
* server → caller ``{"op": "exit", "pid", "status"}`` whenever a child ends (status as ``Popen.returncode``).
* server → caller ``{"op": "ready", "pid", "problems"}`` once preloading is done; ``problems`` lists modules that
  could not be preloaded (the server's own stderr goes nowhere, so as not to hold the caller's stderr open).
* rank → server, on a pipe of the server's that forked ranks inherit: a line naming what the rank imported of
  torch's costly lazy parts (``learned_imports``); the server imports them for later calls' ranks.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import selectors
import shutil
import signal
import socket
import sys
from typing import Dict, List, Optional, Set, Tuple

from databricks.air import _variables
from databricks.air._engine.call_files import CALL_DIR_PREFIX
from databricks.air._engine.frozen_imports import import_for_life
from databricks.air._engine.learned_imports import LearnedImports
from databricks.air._engine.processes import die_with_parent, kill_group, listen, python_command
from databricks.air._switches import switched_off

MAX_MESSAGE = 1 << 20
_IDLE_SECONDS = 0.5
CALL_COMING = "call"
"""The server's second argument when it was started for a call that is getting ready (see ``RankServer.serve``)."""
MAX_FDS = 512

READS_RANK_AT_IMPORT = ("lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics")
"""Packages known to read the rank variables (``RANK``, ``LOCAL_RANK``) once, when imported: Lightning's and
torchmetrics' ``rank_zero_only.rank``. Imported by the server, where no rank exists yet, they would hold rank 0 in
every rank; so they are never preloaded, and ranks import them themselves."""


def send(sock: socket.socket, message: dict, fds: Optional[List[int]] = None) -> None:
    """Send one message (and file descriptors) over the control socket."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def receive(sock: socket.socket) -> Tuple[Optional[dict], List[int]]:
    """Receive one message; ``(None, [])`` at EOF."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return pickle.loads(data), fds


def status_from_wait(wait_status: int) -> int:
    """Turn a ``waitpid`` status into ``Popen.returncode`` form (negative for a signal)."""
    return os.waitstatus_to_exitcode(wait_status)


class RankServer:
    """The server's state: the control socket and the children it forked."""

    def __init__(self, control: socket.socket, fork_safe: bool = True) -> None:
        self.control = control
        self.fork_safe = fork_safe
        """False once a package of :data:`READS_RANK_AT_IMPORT` is loaded here: ranks then start as new
        interpreters."""
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, None)
        self.learned = LearnedImports()
        """What the ranks imported that this server has not: imported when idle, for later calls' ranks."""
        self.selector.register(self.learned.read_fd, selectors.EVENT_READ, self.learned)
        self.children: Dict[int, int] = {}  # pidfd -> pid
        self.call_dirs: Set[str] = set()
        self.pid = os.getpid()
        self.deferred: List[str] = []
        """Modules to import once idle (``serve``)."""
        self.served_a_call = False

    # --- the loop ------------------------------------------------------------------------------------------------

    def serve(self, problems: List[str], deferred: List[str], call_coming: bool = False) -> None:
        """Answer requests until the caller goes.

        Modules to import later, the ``deferred`` ones and those the ranks turn out to use (``learned_imports``),
        are imported when the server is idle (half a second with no rank running and no request), or just before
        it forks a later call's ranks (calls in a loop leave it no idle time: that call's ranks then start with
        them loaded). Never as soon as a call's ranks end: a script that makes one call and exits would pay for an
        import (seconds of CPU time for MLflow and its store) that no rank uses.

        ``call_coming``: the server was started for a call that is getting ready (opening its MLflow run, say), so
        the time before its first request is not idle time: an import begun then would hold that call's ranks back
        for its whole length (about a second for MLflow and its store, more under load). That call's ranks start
        without them."""
        self.deferred = list(deferred)
        try:
            send(self.control, {"op": "ready", "pid": self.pid, "problems": problems})
        except OSError:
            pass  # the caller is gone already; read what it sent (call directories to remove), then EOF
        try:
            while True:
                idle = self._imports_pending() and not self.children and not call_coming
                ready = self.selector.select(_IDLE_SECONDS if idle else None)
                for key, _ in ready:
                    if key.data is None:
                        if not self._handle_request():
                            return
                    elif key.data is self.learned:
                        self.learned.read()
                    else:
                        self._reap(key.fd)
                if self.children:
                    call_coming = False  # the call's ranks (or its store) run: what comes next is idle time
                if idle and not ready:  # half a second with nothing to do
                    self._import_pending()
        finally:
            self.kill_all()
            self.remove_call_dirs()

    def _imports_pending(self) -> bool:
        return bool(self.deferred or self.learned.pending)

    def _import_pending(self) -> None:
        """Import the deferred and the learned modules: later ranks start with them loaded."""
        import_for_life(self.deferred)
        self.deferred = []
        self.learned.import_pending()
        self.fork_safe = self.fork_safe and not rank_readers_loaded()

    def _handle_request(self) -> bool:
        try:
            message, fds = receive(self.control)
        except ConnectionError:
            return False
        if message is None:  # the caller is gone
            return False
        op = message["op"]
        if op == "adopt":
            self.call_dirs = {path for path in self.call_dirs if os.path.isdir(path)}
            self.call_dirs.add(message["call_dir"])
            return True
        try:
            return self._answer(op, message, fds)
        except OSError:  # the answer could not be sent: the caller is gone
            return False

    def _answer(self, op: str, message: dict, fds: List[int]) -> bool:
        if op == "spawn":
            if self.served_a_call:
                # What is pending comes first (calls in a loop leave the server no idle time): this call's ranks
                # then start with it loaded rather than each importing it.
                self._import_pending()
            self.served_a_call = True
            try:
                pids = self._spawn_ranks(message["call_dir"], message["ranks"], message["exec"], fds)
            except OSError as error:  # fork failed: out of memory or process limit
                send(self.control, {"op": "error", "message": f"cannot start the rank processes: {error}"})
            else:
                send(self.control, {"op": "spawned", "pids": pids})
        elif op == "store":
            try:
                answer = self._start_store(message["host"], message["world_size"], message["port"], message["timeout"])
            except OSError as error:  # fork failed
                answer = {"op": "error", "message": f"cannot start the store process: {error}"}
            send(self.control, answer)
        else:
            send(self.control, {"op": "error", "message": f"unknown request {op!r}"})
        return True

    def remove_call_dirs(self) -> None:
        """Remove the private call directories of calls the caller did not live to clean up."""
        for path in self.call_dirs:
            if os.path.basename(path).startswith(CALL_DIR_PREFIX):
                shutil.rmtree(path, ignore_errors=True)
        self.call_dirs.clear()

    def _watch(self, pid: int) -> None:
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.selector.register(pidfd, selectors.EVENT_READ, pid)

    def _reap(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        # The leader is a zombie now, so its pid (and process group id) cannot have been reused: kill whatever it
        # left in its group (DataLoader workers, stray subprocesses) before reaping it.
        kill_group(pid, signal.SIGKILL)
        _, wait_status = os.waitpid(pid, 0)
        try:
            send(self.control, {"op": "exit", "pid": pid, "status": status_from_wait(wait_status)})
        except OSError:
            pass  # the caller is gone; the control socket's EOF ends the loop

    def kill_all(self) -> None:
        """Kill every child's process group and reap the children."""
        for pidfd, pid in list(self.children.items()):
            kill_group(pid, signal.SIGKILL)
        for pidfd, pid in list(self.children.items()):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            os.close(pidfd)
        self.children.clear()

    # --- children ------------------------------------------------------------------------------------------------

    def _become_child(self) -> None:
        """In a freshly forked child: a session of its own, killed with the server, no server state left open."""
        os.setsid()
        die_with_parent(self.pid)  # also when the server died between fork and prctl
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        self.selector.close()
        for pidfd in self.children:
            os.close(pidfd)
        self.children.clear()
        self.control.close()
        self.learned.close_in_rank()

    def _spawn_ranks(self, call_dir: str, ranks: List[int], exec_fresh: bool, fds: List[int]) -> List[int]:
        pids: List[int] = []
        try:
            for index, rank in enumerate(ranks):
                pids.append(self._fork_rank(call_dir, rank, exec_fresh, fds[2 * index], fds[2 * index + 1], fds))
        except OSError:
            for pid in pids:  # all or none
                kill_group(pid, signal.SIGKILL)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return pids

    def _fork_rank(self, call_dir: str, rank: int, exec_fresh: bool, out_fd: int, err_fd: int, fds: List[int]) -> int:
        """Fork one rank with the given stdout/stderr pipes; ``fds`` are every descriptor of the request."""
        pid = os.fork()
        if pid == 0:
            try:
                self._become_child()
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(out_fd, 1)
                os.dup2(err_fd, 2)
                for fd in set(fds) | {devnull}:
                    if fd > 2:
                        os.close(fd)
                from databricks.air._engine import rank as rank_module  # preloaded: costs nothing here

                if exec_fresh or not self.fork_safe:
                    os.execv(sys.executable, python_command(rank_module.__name__, [call_dir, str(rank)]))
                rank_module.run(call_dir, rank, self.learned.write_fd)
            finally:
                os._exit(1)
        self._watch(pid)
        return pid

    def _start_store(self, host: str, world_size: int, port: int, timeout: float) -> dict:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self._become_child()
                os.close(read_end)
                _host_store(write_end, host, world_size, port, timeout)
            finally:
                os._exit(1)
        os.close(write_end)
        self._watch(pid)
        with os.fdopen(read_end, "rb") as stream:
            answer = stream.read()
        if answer.startswith(b"port "):
            return {"op": "store", "pid": pid, "port": int(answer.split()[1])}
        return {"op": "error", "message": answer.decode(errors="replace") or "the store process died"}


NO_STORE_HERE = "torch.distributed cannot be imported in the rank server"
"""The start of a failed ``store`` answer that means "let rank 0 host the store", not "the address is wrong"."""


def _host_store(report_fd: int, host: str, world_size: int, port: int, timeout: float) -> None:
    """Host the rendezvous ``TCPStore`` (as torchrun's agent does) on ``host`` only and report its port; then wait
    to be killed. The store is unauthenticated: it must not listen on addresses the user did not ask for."""
    import datetime

    try:
        from torch.distributed import TCPStore
    except BaseException as error:  # noqa: BLE001 - torch without distributed: rank 0 hosts the store instead
        os.write(report_fd, f"{NO_STORE_HERE}: {error}".encode())
        os._exit(1)
    try:
        listener = listen(host, port)
        # The store serves the descriptor without owning it: detached, it stays open until this process ends.
        port = listener.getsockname()[1]
        store = TCPStore(
            host,
            port,
            world_size,
            is_master=True,
            timeout=datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=listener.detach(),
        )
        os.write(report_fd, f"port {store.port}".encode())
    except OSError as error:  # listen's own message names the address
        os.write(report_fd, str(error).encode())
        os._exit(1)
    except BaseException as error:  # noqa: BLE001
        os.write(report_fd, f"cannot host the rendezvous store on {host}:{port}: {error}".encode())
        os._exit(1)
    os.close(report_fd)
    while True:
        signal.pause()


def preload() -> Tuple[List[str], bool]:
    """Import what every rank needs, so that forked ranks start warm. Never touches CUDA.

    Returns the problems (what could not be imported, and why: a rank that needs it imports it again and sees the
    real error; what was not preloaded, and why), and whether ranks can be forked from this server: not once a
    package that reads the rank at import (:data:`READS_RANK_AT_IMPORT`) came in with another one.
    """
    modules = ["cloudpickle", "databricks.air._engine.rank", "torch", "torch.distributed", "torch.nn"]
    problems = []
    for name in os.environ.get(_variables.PRELOAD, "").split(","):
        name = name.strip()
        if name.partition(".")[0] in READS_RANK_AT_IMPORT:
            problems.append(
                f"not preloading {name}: it reads the rank (RANK, LOCAL_RANK) when imported, so every rank would "
                "see rank 0; ranks import it themselves"
            )
        elif name:
            modules.append(name)
    problems += import_for_life(modules)
    loaded = rank_readers_loaded()
    if loaded:
        problems.append(
            f"{_variables.PRELOAD} imported {', '.join(loaded)}, which read the rank (RANK, LOCAL_RANK) when "
            "imported, so every rank would see rank 0: ranks start as new interpreters instead (slower). Remove "
            f"what imports them from {_variables.PRELOAD}"
        )
    return problems, not loaded


def rank_readers_loaded() -> List[str]:
    """The packages of :data:`READS_RANK_AT_IMPORT` that this process has imported."""
    return sorted(name for name in READS_RANK_AT_IMPORT if name in sys.modules)


def deferred_preloads() -> List[str]:
    """Modules worth having in ranks but not worth delaying the first call for: with tracking on, MLflow and its
    SQL store (the default store, which a rank's first ``log_metric`` would import: seconds, like MLflow itself)."""
    if switched_off(_variables.MLFLOW):
        return []
    return (
        ["mlflow", "mlflow.store.tracking.sqlalchemy_store"] if importlib.util.find_spec("sqlalchemy") else ["mlflow"]
    )


def main() -> None:
    """Entry point of the server's interpreter: ``python -c "...; main()" <control fd> [call]``
    (``rank_server_handle``; ``call``: :data:`CALL_COMING`)."""
    control = socket.socket(fileno=int(sys.argv[1]))
    # Ctrl-C in a terminal reaches the whole foreground group; the caller decides what happens to the ranks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    problems, fork_safe = preload()
    RankServer(control, fork_safe).serve(problems, deferred_preloads(), call_coming=sys.argv[2:3] == [CALL_COMING])


if __name__ == "__main__":
    main()
