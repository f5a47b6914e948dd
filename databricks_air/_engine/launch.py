"""Running one call: start the ranks, stream their output, wait with a timeout, collect results, clean up.

This is the engine's only entry point (:func:`run`). It knows nothing of MLflow or accelerator names: it runs a
pickled function once per rank with a torchrun-compatible environment and returns every rank's value in rank
order, or raises.

Lifecycle guarantees:

* the first failing rank stops all others at once (SIGTERM to each rank's process group, SIGKILL after
  ``grace_period``; the rules are :class:`~databricks.air._engine.supervision.Supervisor`'s);
* ``timeout`` bounds the whole call (:class:`LocalExecutionTimeoutError`);
* ``KeyboardInterrupt`` stops every rank and every process a rank started, then propagates (a second one skips
  the grace period);
* if the caller dies, the rank server sees its control socket close and kills every rank's process group;
* the private call directory is removed and no process is left when :func:`run` returns or raises.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import time
from typing import Any, Dict, List, Optional, Tuple

from databricks.air import _variables
from databricks.air._engine import rank_server_handle
from databricks.air._engine.call_files import CallFiles, RankSetup
from databricks.air._engine.failures import RankOutcome, results_or_error
from databricks.air._engine.output import RankOutput, make_outputs
from databricks.air._engine.processes import free_port, kill_group
from databricks.air._engine.rank_environ import job_environ
from databricks.air._engine.rank_server_handle import RankServerHandle
from databricks.air._engine.supervision import Supervisor
from databricks.air._engine.values import read_value_file
from databricks.air.exceptions import (
    OutputCollectionError,
    RuntimeConfigurationError,
    WorkloadCreationError,
)

START_METHODS = ("fork", "spawn")
_DRAIN_SECONDS = 2.0


@dataclasses.dataclass
class Launch:
    """Everything the engine needs for one call."""

    name: str
    """The function's name, for messages."""
    world_size: int
    function: bytes
    """The cloudpickled function."""
    arguments: bytes
    """``(args, kwargs)`` in :mod:`databricks.air._engine.values` format."""
    environ: Dict[str, str]
    cwd: str
    sys_path: List[str]
    log_dir: str
    timeout: Optional[float] = None
    timeout_note: str = ""
    """Appended to the timeout message, e.g. how to change the limit."""
    show_all_ranks: bool = False
    start_method: str = "fork"
    """``fork``: ranks forked from the torch-preloaded rank server; ``spawn``: a new interpreter per rank."""
    grace_period: float = 3.0
    code_files: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Function name -> source file of code shipped by value, to mend rank tracebacks."""
    hints: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Text seen in the root cause's error or output -> advice added to the failure report."""


def run(launch: Launch) -> List[Any]:
    """Run ``launch`` and return every rank's value, indexed by global rank."""
    if launch.start_method not in START_METHODS:
        raise RuntimeConfigurationError(
            f"{_variables.START_METHOD} must be one of {', '.join(START_METHODS)}, not {launch.start_method!r}"
        )
    # The timeout bounds the whole call, the rank server's start included.
    deadline = None if launch.timeout is None else time.monotonic() + launch.timeout
    server = rank_server_handle.pool.acquire(launch.environ)
    files = CallFiles.create()
    server.notify({"op": "adopt", "call_dir": files.path})
    call = None
    try:
        files.write_bytes(files.function, launch.function)
        files.write_bytes(files.arguments, launch.arguments)
        server.wait_ready()
        call = _Call(launch, server, files)
        call.start()
        call.supervise(deadline)
        return call.results()
    finally:
        try:
            if call is not None:
                call.close()
        finally:
            files.remove()
            rank_server_handle.pool.release(server)


class _Call:
    """The running ranks of one call and what is known of them."""

    def __init__(self, launch: Launch, server: RankServerHandle, files: CallFiles) -> None:
        self.launch = launch
        self.server = server
        self.files = files
        self.outcomes: Dict[int, RankOutcome] = {}  # pid -> outcome
        self.store_pid: Optional[int] = None
        self.outputs: Dict[int, RankOutput] = {}
        self.pipes: Dict[int, Tuple[int, str]] = {}  # read fd -> (rank, stream)
        self.selector = selectors.DefaultSelector()
        self.supervisor = Supervisor(
            receive=self._poll,
            running=lambda: bool(self.running),
            terminate=self._terminate,
            kill=self._kill,
            grace_period=launch.grace_period,
        )

    # --- starting ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        launch = self.launch
        environ = self._common_environ()
        self.files.write_setup(
            RankSetup(
                environ=environ,
                rank_environ=[
                    {"RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)} for r in range(launch.world_size)
                ],
                cwd=launch.cwd,
                sys_path=list(launch.sys_path),
            )
        )
        self.outputs = make_outputs(launch.log_dir, launch.world_size, launch.show_all_ranks)
        write_ends: List[int] = []
        for rank in range(launch.world_size):
            for stream in ("stdout", "stderr"):
                read_end, write_end = os.pipe()
                os.set_blocking(read_end, False)
                self.pipes[read_end] = (rank, stream)
                self.selector.register(read_end, selectors.EVENT_READ, (rank, stream))
                write_ends.append(write_end)
        try:
            answer = self.server.request(
                {
                    "op": "spawn",
                    "call_dir": self.files.path,
                    "ranks": list(range(launch.world_size)),
                    "exec": launch.start_method == "spawn",
                },
                write_ends,
            )
        finally:
            for fd in write_ends:
                os.close(fd)
        if answer["op"] != "spawned":
            raise WorkloadCreationError(answer.get("message", "the rank server could not start the ranks"))
        for rank, pid in enumerate(answer["pids"]):
            self.outcomes[pid] = RankOutcome(rank=rank, pid=pid, log_path=self.outputs[rank].log_path)
        self.selector.register(self.server.socket, selectors.EVENT_READ, "server")
        for event in self.server.take_backlog():
            self._on_exit(event)

    def _common_environ(self) -> Dict[str, str]:
        """The environment every rank gets: the caller's, plus torchrun's variables."""
        launch = self.launch
        environ = dict(launch.environ)
        size = str(launch.world_size)
        environ.setdefault("MASTER_ADDR", "127.0.0.1")
        requested_port = _requested_port(environ.get("MASTER_PORT", ""))
        # Host the rendezvous store ourselves, as torchrun's agent does: the port is bound before any rank starts
        # (no race between concurrent calls) and no rank waits for rank 0 to start listening.
        answer = self.server.request(
            {"op": "store", "world_size": launch.world_size, "port": requested_port, "timeout": 1800.0}
        )
        if answer["op"] == "store":
            self.store_pid = answer["pid"]
            environ["MASTER_PORT"] = str(answer["port"])
            environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
        elif requested_port:
            raise RuntimeConfigurationError(
                f"MASTER_PORT={requested_port} is set, but the rendezvous store cannot listen on it "
                f"({answer['message']}). Free that port, or unset MASTER_PORT to let databricks.air pick one."
            )
        else:  # no torch.distributed in the rank server: rank 0 hosts the store, as plain env:// init does
            environ["MASTER_PORT"] = str(free_port())
            environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // launch.world_size)))
        environ.update(
            {
                "WORLD_SIZE": size,
                "LOCAL_WORLD_SIZE": size,
                "ROLE_WORLD_SIZE": size,
                "NODE_RANK": "0",
                "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "1",
                **job_environ(),
            }
        )
        return environ

    # --- waiting -------------------------------------------------------------------------------------------------

    @property
    def running(self) -> List[RankOutcome]:
        return [o for o in self.outcomes.values() if o.status is None]

    def supervise(self, deadline: Optional[float]) -> None:
        """Wait until every rank has ended, stopping them all on the first failure, timeout or interrupt."""
        self.supervisor.run(deadline)
        self._drain_output()

    def _poll(self, seconds: float) -> None:
        for key, _ in self.selector.select(seconds):
            if key.data == "server":
                message = self.server.receive()
                if message is None:
                    self._server_lost()
                elif message["op"] == "exit":
                    self._on_exit(message)
            else:
                self._read_pipe(key.fd)

    def _server_lost(self) -> None:
        # The server killed every rank group on its way out (or died with them, via PDEATHSIG).
        self.selector.unregister(self.server.socket)
        for outcome in self.running:
            outcome.status = -signal.SIGKILL
            outcome.exited_at = time.time()
        raise OutputCollectionError("the databricks.air rank server exited during the call; every rank was stopped")

    def _on_exit(self, event: Dict[str, Any]) -> None:
        pid = event["pid"]
        if pid == self.store_pid:
            self.store_pid = None
            return
        outcome = self.outcomes.get(pid)
        if outcome is None:  # a leftover of an earlier call on this server
            return
        outcome.status = event["status"]
        outcome.exited_at = time.time()
        outcome.record = self._read_record(outcome.rank)
        if not outcome.succeeded:
            self.supervisor.stop()

    def _read_record(self, rank: int) -> Optional[Dict[str, Any]]:
        path = self.files.result(rank)
        if not os.path.exists(path):
            return None
        try:
            return read_value_file(path)
        except Exception as error:  # noqa: BLE001 - a value the caller cannot unpickle
            return {
                "ok": False,
                "kind": "unpicklable-result",
                "message": f"the return value of rank {rank} cannot be unpickled in the caller: "
                f"{type(error).__name__}: {error}",
                "time": time.time(),
            }

    def _read_pipe(self, fd: int) -> None:
        rank, stream = self.pipes[fd]
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if data:
            self.outputs[rank].feed(stream, data)
        else:
            self.selector.unregister(fd)
            os.close(fd)
            del self.pipes[fd]

    def _drain_output(self) -> None:
        """Read what the ranks wrote before they ended (their process groups are gone, so EOF comes soon)."""
        limit = time.monotonic() + _DRAIN_SECONDS
        while self.pipes and time.monotonic() < limit:
            for key, _ in self.selector.select(0.05):
                if key.data != "server":
                    self._read_pipe(key.fd)

    # --- stopping ------------------------------------------------------------------------------------------------

    def _terminate(self) -> None:
        """Ask every running rank (and everything it started) to terminate."""
        now = time.time()
        for outcome in self.running:
            outcome.stopped_at = now
            kill_group(outcome.pid, signal.SIGTERM)

    def _kill(self) -> None:
        for outcome in self.running:
            kill_group(outcome.pid, signal.SIGKILL)

    # --- ending --------------------------------------------------------------------------------------------------

    def results(self) -> List[Any]:
        return results_or_error(self.outcomes.values(), self.launch, self.supervisor)

    def close(self) -> None:
        """Make sure nothing of this call survives, whatever happened."""
        self._kill()
        if self.store_pid is not None:
            kill_group(self.store_pid, signal.SIGKILL)
        self._wait_for_exits()
        for fd in list(self.pipes):
            self.selector.unregister(fd)
            os.close(fd)
        self.pipes.clear()
        self.selector.close()
        for output in self.outputs.values():
            output.finish()

    def _wait_for_exits(self) -> None:
        # The server reaps and reports every child; wait for those notices so the server goes back to the pool
        # clean. SIGKILL has been sent, so this is quick.
        limit = time.monotonic() + 5.0
        while (self.running or self.store_pid is not None) and time.monotonic() < limit:
            if not self.server.alive():
                return
            try:
                ready = self.selector.select(0.1)
            except (KeyboardInterrupt, ValueError):
                return
            for key, _ in ready:
                if key.data == "server":
                    message = self.server.receive()
                    if message is None:
                        return
                    if message["op"] == "exit":
                        self._on_exit(message)
                else:
                    self._read_pipe(key.fd)


def _requested_port(value: str) -> int:
    """The caller's ``MASTER_PORT`` (0 when unset)."""
    value = value.strip()
    if not value:
        return 0
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise RuntimeConfigurationError(f"MASTER_PORT must be a port number (1-65535), not {value!r}")
    return int(value)
