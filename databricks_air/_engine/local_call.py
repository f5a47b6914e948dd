"""A call whose ranks run on this machine: forked by a rank server, each in a process group of its own.

The :class:`~databricks.air._engine.call.Call` for local runs. Starting takes a rank server from the pool
(:mod:`databricks.air._engine.rank_server_handle`; a warm one forks ranks in milliseconds), writes the call's private
files (:mod:`databricks.air._engine.call_files`), has the server host the rendezvous store and fork one rank per
accelerator with the torchrun environment, and reads every rank's stdout and stderr through pipes. The server
reports each rank's exit; the rank's record is in its result file.

Lifecycle guarantees:

* a rank and everything it started is signalled as one process group (:func:`~.processes.kill_group`);
* if the caller dies, the rank server sees its control socket close and kills every rank's process group;
* the private call directory is removed, and no process of the call is left, once :meth:`LocalCall.close` returns;
  the server goes back to the pool for the next call.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _variables
from databricks.air._engine import gpu_leases, rank_server_handle, restarts, snapshot
from databricks.air._engine.call import Call, Launch
from databricks.air._engine.call_files import CallFiles, RankSetup
from databricks.air._engine.outcome import RankOutcome, read_record
from databricks.air._engine.processes import LOOPBACK, free_port, kill_group
from databricks.air._engine.rank_environ import coordinates, flight_recorder_environ, job_environ
from databricks.air._engine.rank_server import NO_STORE_HERE
from databricks.air._engine.rank_server_handle import RankServerHandle
from databricks.air._engine.snapshot import GroupPosition, ProbeTarget, RankSnapshot
from databricks.air.exceptions import (
    LocalExecutionTimeoutError,
    OutputCollectionError,
    RuntimeConfigurationError,
    WorkloadCreationError,
)
from databricks.air._notices import notice

START_METHODS = ("fork", "spawn")
_DRAIN_SECONDS = 2.0
_EXIT_NOTICE_SECONDS = 5.0


class LocalCall(Call):
    """The ranks of one call on this machine, and what is known of them."""

    runs_here = True

    def __init__(self, launch: Launch) -> None:
        super().__init__(launch)
        self.server: Optional[RankServerHandle] = None
        self.files: Optional[CallFiles] = None
        self.store_pid: Optional[int] = None
        self.ranks_by_pid: Dict[int, int] = {}
        self.pipes: Dict[int, Tuple[int, str]] = {}  # read fd -> (rank, stream)
        self.selector = selectors.DefaultSelector()
        self.lease: Optional[gpu_leases.Lease] = None

    @classmethod
    def check(cls, environ: Mapping[str, str], start_method: str) -> None:
        if start_method not in START_METHODS:
            raise RuntimeConfigurationError(
                f"{_variables.START_METHOD} must be one of {', '.join(START_METHODS)}, not {start_method!r}; unset it "
                "for fork, the default"
            )
        _requested_port(environ.get("MASTER_PORT", ""))

    @classmethod
    def prewarm(cls, environ: Dict[str, str]) -> None:
        """Start a rank server for ``environ`` now, unless one is idle: it imports torch while the caller gets on."""
        rank_server_handle.pool.prewarm(environ)

    # --- starting ------------------------------------------------------------------------------------------------

    def start(self, deadline: Optional[float]) -> None:
        launch = self.launch
        self.check(launch.environ, launch.start_method)
        if launch.gpus:
            self.lease = self._lease(deadline)
            if launch.on_lease is not None:
                launch.on_lease(self.lease.devices)
        if launch.on_started is not None:
            launch.on_started()
        self.server = server = rank_server_handle.pool.acquire(launch.environ)
        self.files = files = CallFiles.create()
        server.notify({"op": "adopt", "call_dir": files.path})
        files.write_bytes(files.function, launch.function)
        files.write_bytes(files.arguments, launch.arguments)
        if not server.wait_ready(deadline):  # the call's timeout covers the server's start (its import of torch)
            limit = f"its timeout of {launch.timeout:g} s" if launch.timeout is not None else "its deadline"
            raise LocalExecutionTimeoutError(
                f"{launch.name} did not finish within {limit}: the rank server (a new interpreter that imports torch) "
                f"was not ready yet, so no rank was started. {launch.timeout_note}".rstrip()
            )
        files.write_setup(
            RankSetup(
                environ=self._common_environ(),
                rank_environ=[
                    coordinates(r, r, launch.world_size, launch.world_size, 0, 1) for r in range(launch.world_size)
                ],
                cwd=launch.cwd,
                sys_path=list(launch.sys_path),
                argv=list(launch.argv),
            )
        )
        self.open_outputs(launch.world_size)
        write_ends: List[int] = []
        for rank in range(launch.world_size):
            for stream in ("stdout", "stderr"):
                read_end, write_end = os.pipe()
                os.set_blocking(read_end, False)
                self.pipes[read_end] = (rank, stream)
                self.selector.register(read_end, selectors.EVENT_READ, (rank, stream))
                write_ends.append(write_end)
        try:
            answer = server.request(
                {
                    "op": "spawn",
                    "call_dir": files.path,
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
            self.ranks_by_pid[pid] = rank
            self.outcomes[rank] = RankOutcome(rank=rank, pid=pid, log_path=self.outputs[rank].log_path)
        self.selector.register(server.socket, selectors.EVENT_READ, "server")
        for event in server.take_backlog():
            self._on_exit(event)

    def _lease(self, deadline: Optional[float]) -> gpu_leases.Lease:
        """GPUs of the call's own, waiting (first come first served) while other calls hold too many."""
        launch = self.launch

        def queued(what: str) -> None:
            notice(f"{launch.name} is {what}")
            if launch.on_queued is not None:
                launch.on_queued(what)

        try:
            return gpu_leases.take(
                launch.world_size,
                launch.environ,
                launch.gpus,
                name=launch.name,
                deadline=deadline,
                on_wait=queued,
                cancelled=launch.cancelled,
            )
        except gpu_leases.LeaseTimeout as error:
            raise LocalExecutionTimeoutError(f"{error}; nothing was started. {launch.timeout_note}".strip()) from None

    def _common_environ(self) -> Dict[str, str]:
        """The environment every rank gets: the caller's, plus the rendezvous and the job's torchrun variables."""
        assert self.server is not None
        launch = self.launch
        environ = dict(launch.environ)
        environ.setdefault("MASTER_ADDR", LOOPBACK)
        requested_port = _requested_port(environ.get("MASTER_PORT", ""))
        # Host the rendezvous store ourselves, as torchrun's agent does: the port is bound before any rank starts
        # (no race between concurrent calls) and no rank waits for rank 0 to start listening. It listens on
        # MASTER_ADDR only: an unauthenticated store must not be reachable from other machines unasked.
        answer = self.server.request(
            {
                "op": "store",
                "host": environ["MASTER_ADDR"],
                "world_size": launch.world_size,
                "port": requested_port,
                "timeout": 1800.0,
            }
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
        elif not answer.get("message", "").startswith(NO_STORE_HERE):
            raise RuntimeConfigurationError(
                f"MASTER_ADDR={environ['MASTER_ADDR']} is set, but the rendezvous store cannot listen there "
                f"({answer['message']}). Name an address of this machine, or unset MASTER_ADDR for 127.0.0.1."
            )
        else:  # no torch.distributed in the rank server: rank 0 hosts the store, as plain env:// init does
            environ["MASTER_PORT"] = str(free_port(environ["MASTER_ADDR"]))
            environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // launch.world_size)))
        environ.update(job_environ(launch.job_id, launch.attempt, launch.max_restarts))
        environ.update(flight_recorder_environ(launch.environ, launch.log_dir))
        environ.update(restarts.last_checkpoint_environ(launch.log_dir))
        if self.lease is not None:
            environ.update(self.lease.environ())
        return environ

    # --- waiting -------------------------------------------------------------------------------------------------

    def poll(self, seconds: float) -> None:
        assert self.server is not None
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
        assert self.server is not None
        self.selector.unregister(self.server.socket)
        for outcome in self.running():
            outcome.status = -signal.SIGKILL
            outcome.exited_at = time.time()
        raise OutputCollectionError("the databricks.air rank server exited during the call; every rank was stopped")

    def _on_exit(self, event: Dict[str, Any]) -> None:
        pid = event["pid"]
        if pid == self.store_pid:
            self.store_pid = None
            return
        rank = self.ranks_by_pid.get(pid)
        if rank is None:  # a leftover of an earlier call on this server
            return
        assert self.files is not None
        self.record_exit(rank, event["status"], read_record(self.files.result(rank), rank))

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

    def drain(self) -> None:
        """Read what the ranks wrote before they ended (their process groups are gone, so EOF comes soon)."""
        limit = time.monotonic() + _DRAIN_SECONDS
        while self.pipes and time.monotonic() < limit:
            for key, _ in self.selector.select(0.05):
                if key.data != "server":
                    self._read_pipe(key.fd)

    # --- looking at the ranks ------------------------------------------------------------------------------------

    def snapshot(self, ranks: Sequence[RankOutcome], budget: float) -> Dict[int, RankSnapshot]:
        return snapshot.take([self._target(outcome) for outcome in ranks], budget)

    def collectives(self, ranks: Sequence[RankOutcome], timeout: float) -> Dict[int, Optional[List[GroupPosition]]]:
        return snapshot.ask_all_collectives([self._target(outcome) for outcome in ranks], timeout)

    def issue_times(
        self, ranks: Sequence[RankOutcome], since: Dict[int, Dict[str, int]], timeout: float
    ) -> Dict[int, Optional[Dict[str, Any]]]:
        return snapshot.ask_all_times([self._target(outcome) for outcome in ranks], since, timeout)

    def _target(self, outcome: RankOutcome) -> ProbeTarget:
        assert self.files is not None
        rank = outcome.rank
        return snapshot.ProbeTarget(rank, outcome.pid, self.files.stacks(rank), self.files.probe(rank))

    # --- stopping and ending -------------------------------------------------------------------------------------

    def send(self, sig: int, ranks: Sequence[RankOutcome]) -> None:
        for outcome in ranks:
            kill_group(outcome.pid, sig)

    def close(self) -> None:
        """Make sure nothing of this call survives, whatever happened; give the rank server back."""
        try:
            self.kill()
            if self.store_pid is not None:
                kill_group(self.store_pid, signal.SIGKILL)
            self._wait_for_exits()
            for fd in list(self.pipes):
                self.selector.unregister(fd)
                os.close(fd)
            self.pipes.clear()
            self.selector.close()
            self.close_outputs()
        finally:
            if self.files is not None:
                self.files.remove()
            if self.server is not None:
                rank_server_handle.pool.release(self.server)
            if self.lease is not None:  # last: the GPUs are free once nothing of the call runs on them
                self.lease.release()

    def _wait_for_exits(self) -> None:
        # The server reaps and reports every child; wait for those notices so the server goes back to the pool
        # clean. SIGKILL has been sent, so this is quick.
        server = self.server
        if server is None:
            return
        limit = time.monotonic() + _EXIT_NOTICE_SECONDS
        while (self.running() or self.store_pid is not None) and time.monotonic() < limit:
            if not server.alive():
                return
            try:
                ready = self.selector.select(0.1)
            except (KeyboardInterrupt, ValueError):
                return
            for key, _ in ready:
                if key.data == "server":
                    message = server.receive()
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
        raise RuntimeConfigurationError(
            f"MASTER_PORT must be a port number (1-65535), not {value!r}; unset it to let databricks.air pick a "
            f"free one"
        )
    return int(value)
