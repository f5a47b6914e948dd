"""The Ray actor that hosts one rank on its node.

The rank itself is a child process running the local engine's rank code (:mod:`databricks.air._engine.rank`), so
a remote rank loads, runs, fails and reports exactly as a local one: the same failure records, the same handling of
``sys.exit`` and of values that cannot be pickled. The actor writes the call files on its node, starts the rank in a
session of its own (so that stopping it stops everything it started), and hands its output and its result back to
the caller, which polls. If the actor dies, Linux kills the rank with it (``PR_SET_PDEATHSIG``, set by the rank itself).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from databricks.air._engine import rank as rank_entry
from databricks.air._engine import snapshot
from databricks.air._engine.call_files import CallFiles, RankSetup
from databricks.air._engine.processes import free_port, kill_group, python_command
from databricks.air._engine.snapshot import GroupPosition, ProbeTarget, RankSnapshot

_PIPE_DRAIN_SECONDS = 2.0


class RankHost:
    """One rank's host process on a Ray node (used as a Ray actor: ``ray.remote(RankHost)``)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._output: List[Tuple[str, bytes]] = []
        self._status: Optional[int] = None
        self._result: Optional[bytes] = None
        self._process: Optional[subprocess.Popen] = None
        self._files: Optional[CallFiles] = None
        self._rank: Optional[int] = None
        self._readers: List[threading.Thread] = []
        # PR_SET_PDEATHSIG fires when the thread that started the child ends: the rank is started by a thread that
        # lives as long as this actor (an executor's threads never retire).
        self._spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="databricks.air rank")

    # --- where this host is ----------------------------------------------------------------------------------------

    def where(self) -> Dict[str, Any]:
        """This node's id and address, and the GPUs Ray reserved for this rank."""
        import ray

        context = ray.get_runtime_context()
        gpu_ids = [str(gpu) for gpu in context.get_accelerator_ids().get("GPU", [])]
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "gpu_ids": gpu_ids}

    def free_port(self) -> int:
        """A TCP port free on this node now, for ``MASTER_PORT`` (rank 0 listens on it moments later)."""
        return free_port("")  # free on every address: rank 0 listens on this node's, MASTER_ADDR

    # --- the rank ----------------------------------------------------------------------------------------------------

    def start(
        self, rank: int, world_size: int, environ: Dict[str, str], function: bytes, arguments: bytes, argv: List[str]
    ) -> int:
        """Write the call files on this node and start the rank (``argv``: the caller's ``sys.argv``); returns its
        process id."""
        files = CallFiles.create()
        self._files = files
        self._rank = rank
        files.write_bytes(files.function, function)
        files.write_bytes(files.arguments, arguments)
        rank_environ: List[Dict[str, str]] = [{} for _ in range(world_size)]  # `environ` has this rank's own
        full_environ = {**os.environ, **environ}
        # The working directory is Ray's copy of the caller's (runtime_env working_dir), already on sys.path.
        files.write_setup(
            RankSetup(
                environ=full_environ, rank_environ=rank_environ, cwd=os.getcwd(), sys_path=list(sys.path), argv=argv
            )
        )
        # The rank asks to die with this actor before it imports anything (and exits if the actor died first).
        command = python_command(rank_entry.__name__, [files.path, str(rank)], parent_pid=os.getpid())
        process = self._spawner.submit(
            subprocess.Popen,
            command,
            env=full_environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        ).result()
        self._process = process
        for stream_name, stream in (("stdout", process.stdout), ("stderr", process.stderr)):
            reader = threading.Thread(target=self._read, args=(stream_name, stream), daemon=True)
            reader.start()
            self._readers.append(reader)
        threading.Thread(target=self._wait, args=(rank,), daemon=True).start()
        return process.pid

    def poll(self, wait: float) -> Dict[str, Any]:
        """Output since the last poll, and the exit status and result once the rank has ended.

        Waits up to ``wait`` seconds for something to report, so that the caller can poll in a loop cheaply.
        """
        with self._lock:
            self._lock.wait_for(lambda: self._output or self._status is not None, timeout=wait)
            output, self._output = self._output, []
            return {"output": output, "status": self._status, "result": self._result}

    def snapshot(self, budget: float) -> Optional[RankSnapshot]:
        """Where the rank is (stacks, collectives), taken on this node within ``budget`` seconds."""
        target = self._target()
        return None if target is None else snapshot.take_rank(target, time.monotonic() + budget)

    def collectives(self, timeout: float) -> Optional[List[GroupPosition]]:
        """How far the rank got in its collectives (``None``: it did not answer)."""
        target = self._target()
        return None if target is None else snapshot.ask_collectives(target, timeout)

    def times(self, since: Dict[str, int], timeout: float) -> Optional[Dict[str, Any]]:
        """When the rank issued its collectives after ``since``, on this node's clock (``None``: it did not answer)."""
        target = self._target()
        return None if target is None else snapshot.ask_times(target, since, timeout)

    def clock(self) -> float:
        """This node's clock (``time.time()``), for the caller to measure its offset."""
        return time.time()

    def _target(self) -> Optional[ProbeTarget]:
        if self._process is None or self._files is None or self._rank is None:
            return None
        files, rank = self._files, self._rank
        return snapshot.ProbeTarget(rank, self._process.pid, files.stacks(rank), files.probe(rank))

    def stop(self, sig: int) -> None:
        """Signal the rank's whole session (the rank and every process it started)."""
        if self._process is not None and self._status is None:
            kill_group(self._process.pid, sig)

    def close(self) -> None:
        """Kill whatever is left of the rank and remove the call files."""
        if self._process is not None:
            kill_group(self._process.pid, signal.SIGKILL)
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._files is not None:
            self._files.remove()

    # --- inside ------------------------------------------------------------------------------------------------------

    def _read(self, stream_name: str, stream: Any) -> None:
        for data in iter(lambda: stream.read1(1 << 16), b""):
            with self._lock:
                self._output.append((stream_name, data))
                self._lock.notify_all()
        stream.close()

    def _wait(self, rank: int) -> None:
        assert self._process is not None and self._files is not None
        status = self._process.wait()
        # Processes the rank started may hold its pipes open; their output is not worth waiting long for.
        deadline = time.monotonic() + _PIPE_DRAIN_SECONDS
        for reader in self._readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        result_path = self._files.result(rank)
        result = None
        if os.path.exists(result_path):
            with open(result_path, "rb") as stream:
                result = stream.read()
        with self._lock:
            self._result = result
            self._status = status
            self._lock.notify_all()
