"""The local backend's :class:`~.base.NodeLauncher`: one node, this machine, its command under a keeper.

The keeper runs in a session of its own (a signal to the supervisor's process group does not reach it: it sees its
supervisor go and stops the command itself). If the keeper is killed, the command's processes that outlive it are
re-parented to this process, a subreaper (:mod:`.local_supervisor`), and the group stops them before it reports
the attempt: nothing of the command outlives its keeper.
"""

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
_ORPHAN_GRACE_SECONDS = 1.0
"""SIGTERM to SIGKILL for what a killed keeper left behind (as the keeper gives a command whose supervisor died)."""


class LocalNodeGroup(NodeGroup):
    """This machine as node 0: the keeper of its command and the thread that copies its output into the log."""

    def __init__(self, adopts_orphans: bool = False) -> None:
        self.adopts_orphans = adopts_orphans
        """This process is a subreaper, and nothing but the keeper is its child during an attempt: what a killed
        keeper leaves behind comes back to it, and is stopped. (Elsewhere it goes to init, out of reach.)"""
        self.launch: Optional[AttemptLaunch] = None
        self.process: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self._lost: Optional[str] = None

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
            start_new_session=True,
        )
        self._reader = threading.Thread(
            target=copy_output, args=(self.process.stdout, launch.outputs[0]), daemon=True, name="node 0 output"
        )
        self._reader.start()

    def wait(self, timeout: float) -> Optional[List[int]]:
        assert self.process is not None and self._reader is not None
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if status < 0:  # the keeper itself was killed (it exits with a code, never by a signal, of its own accord)
            self._stop_orphans(status)
        self._reader.join(_DRAIN_SECONDS)
        return [keeper.exit_code(status)]

    def _stop_orphans(self, status: int) -> None:
        """Stop what the killed keeper's command left: it was re-parented to this process, a subreaper."""
        assert self.process is not None
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        if self.adopts_orphans:
            keeper.stop_descendants(os.getpid(), _ORPHAN_GRACE_SECONDS, keeper.reap_these)
            self._lost = (
                f"node 0's keeper (pid {self.process.pid}) was killed by {name}; every process of the "
                "command was stopped with it"
            )
        else:
            self._lost = (
                f"node 0's keeper (pid {self.process.pid}) was killed by {name}; the processes its "
                "command started may still run"
            )

    def failure(self) -> Optional[str]:
        return self._lost

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
        if self.process.returncode < 0 and self._lost is None:  # what the killed keeper left came back to us
            self._stop_orphans(self.process.returncode)
        if self._reader is not None:
            self._reader.join(_DRAIN_SECONDS)

    def owner(self) -> Dict[str, Any]:
        return {"keeper_pid": self.process.pid} if self.process is not None else {}


def copy_output(stream: Any, output: NodeOutput) -> None:
    """Copy a pipe into a node's output until its end (once the output cannot be written, e.g. on a full disk,
    it drops what comes: the pipe is read to its end all the same, so the command never blocks on it)."""
    fd = stream.fileno()
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        output.feed(data)
    stream.close()


class LocalNodes(NodeLauncher):
    """This machine, as the one node of a run; ``adopts_orphans``: see :attr:`LocalNodeGroup.adopts_orphans`."""

    def __init__(self, adopts_orphans: bool = False) -> None:
        self.adopts_orphans = adopts_orphans

    def reserve(
        self,
        plan: NodePlan,
        deadline: Optional[float],
        interrupted: Callable[[], bool],
        say: Callable[[str], None] = lambda text: None,
    ) -> Optional[NodeGroup]:
        return LocalNodeGroup(self.adopts_orphans)
