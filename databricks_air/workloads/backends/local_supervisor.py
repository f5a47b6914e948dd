"""``python -m databricks.air.workloads.backends.local_supervisor RUN_FOLDER``: the detached owner of a local run.

SIGTERM (what ``air cancel`` sends after writing the run's cancel request) wakes it up to stop the command;
SIGINT and SIGHUP are ignored, so that nothing of the terminal that submitted the run reaches it.

It is a child subreaper (``PR_SET_CHILD_SUBREAPER``), as each node's keeper is: if a keeper is killed (SIGKILL),
what its command started comes back to the supervisor rather than to init, and the node group stops it
(:mod:`.local_nodes`). Its own messages go to ``supervisor.log`` in the run's folder; when that disk is full they
are lost, never an error that would keep the run from ending.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, TextIO


class _Unfailing:
    """A text stream whose writes never raise (the disk of ``supervisor.log`` may be full)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(run_folder: str) -> int:
    wake = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: wake.set())  # first of all: a cancel may come at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.stdout = _Unfailing(sys.stdout)
    sys.stderr = _Unfailing(sys.stderr)
    from databricks.air._engine.processes import become_subreaper
    from databricks.air.workloads.backends.local_nodes import LocalNodes
    from databricks.air.workloads.registry import RunFolder
    from databricks.air.workloads.supervisor import WorkloadSupervisor

    adopts_orphans = become_subreaper()
    folder = RunFolder(run_folder, int(os.path.basename(run_folder.rstrip(os.sep))))
    status = WorkloadSupervisor(folder, LocalNodes(adopts_orphans), wake=wake).run()
    folder.release_reserve()  # the run's end is recorded (or could not be): the room is no longer needed
    print(f"air: run {folder.run_id} ended {status}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
