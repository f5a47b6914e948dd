"""``python -m databricks.air.workloads.backends.local_supervisor RUN_FOLDER``: the detached owner of a local run.

SIGTERM (what ``air cancel`` sends after writing the run's cancel request) wakes it up to stop the command;
SIGINT and SIGHUP are ignored, so that nothing of the terminal that submitted the run reaches it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def main(run_folder: str) -> int:
    wake = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: wake.set())  # first of all: a cancel may come at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from databricks.air.workloads.backends.local_nodes import LocalNodes
    from databricks.air.workloads.registry import RunFolder
    from databricks.air.workloads.supervisor import Supervisor

    folder = RunFolder(run_folder, int(os.path.basename(run_folder.rstrip(os.sep))))
    status = Supervisor(folder, LocalNodes(), wake=wake).run()
    print(f"air: run {folder.run_id} ended {status}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
