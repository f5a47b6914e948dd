"""The local backend's :class:`~.base.NodeLauncher`: one node, this machine, its command under a keeper."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

from databricks.air._engine import processes
from databricks.air.workloads.backends import keeper
from databricks.air.workloads.backends.base import AttemptLaunch, NodeGroup, NodeLauncher
from databricks.air.workloads.node_output import NodeOutput
from databricks.air.workloads.run_state import NodePlan

_DRAIN_SECONDS = 5.0  # after the keeper exits, its output pipe has no writer left; this is only a safety net


class LocalNodeGroup(NodeGroup):
    """This machine as node 0: the keeper of its command and the thread that copies its output into the log."""

    def __init__(self) -> None:
        self.launch: Optional[AttemptLaunch] = None
        self.process: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None

    def master_address(self) -> str:
        return "127.0.0.1"

    def master_port(self) -> int:
        return processes.free_port()

    def start(self, launch: AttemptLaunch) -> None:
        if len(launch.nodes) != 1:
            raise ValueError(f"the local backend runs one node, not {len(launch.nodes)}")
        self.launch = launch
        self.process = subprocess.Popen(
            [sys.executable, "-m", keeper.__name__, str(launch.grace_seconds), launch.script],
            cwd=launch.cwd,
            env=launch.environ(0),
            stdin=subprocess.PIPE,  # never written: its end of file tells the keeper that we are gone
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._reader = threading.Thread(target=copy_output, args=(self.process.stdout, launch.outputs[0]),
                                        daemon=True, name="node 0 output")
        self._reader.start()

    def wait(self, timeout: float) -> Optional[List[int]]:
        assert self.process is not None and self._reader is not None
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(_DRAIN_SECONDS)
        return [keeper.exit_code(status)]

    def stop(self) -> None:
        if self.process is None or self.launch is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the keeper stops the whole tree, then exits
        try:
            self.process.wait(self.launch.grace_seconds + 30)
        except subprocess.TimeoutExpired:
            self.process.kill()  # the keeper itself is stuck: bash dies with it (parent death signal)
            self.process.wait()
        if self._reader is not None:
            self._reader.join(_DRAIN_SECONDS)

    def owner(self) -> Dict[str, Any]:
        return {"keeper_pid": self.process.pid} if self.process is not None else {}


def copy_output(stream: Any, output: NodeOutput) -> None:
    """Copy a pipe into a node's output until its end."""
    fd = stream.fileno()
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        output.feed(data)
    stream.close()


class LocalNodes(NodeLauncher):
    """This machine, as the one node of a run."""

    def reserve(self, plan: NodePlan, deadline: Optional[float], interrupted: Callable[[], bool],
                say: Callable[[str], None] = lambda text: None) -> Optional[NodeGroup]:
        return LocalNodeGroup()
