"""``python -m databricks.air._ray.loopback_node``: a Ray worker node joining a head on this same machine over loopback.

``ray_launch`` starts one Ray node per machine of a call (:mod:`.rank_cluster`), and other machines join rank 0's
head with ``ray start --address``. Two of the call's Ray nodes may also share a machine (a Ray cluster of several
nodes on one machine, as Ray's own test cluster is), and then ``ray start`` cannot join them where Ray is kept on
loopback: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (what makes Ray answer 127.0.0.1 for this machine, and the default
on macOS and Windows) makes it refuse every worker node, and without it Ray rewrites the head's 127.0.0.1 to the
machine's interface address, where nothing listens. This node joins as ``ray.cluster_utils`` adds nodes: Ray's node
object, given the head's address and this node's as they are.

It runs until SIGTERM (or SIGINT), then stops the node's processes; a reaper process stops them too if this one is
killed. ``Ray runtime started.`` on standard output says that the node is up.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m databricks.air._ray.loopback_node", description=__doc__)
    parser.add_argument("--address", required=True, help="the head's GCS address, HOST:PORT")
    parser.add_argument("--node-ip-address", required=True)
    parser.add_argument("--temp-dir", required=True)
    parser.add_argument("--dashboard-agent-listen-port", type=int, required=True)
    parser.add_argument("--metrics-export-port", type=int, required=True)
    arguments = parser.parse_args(argv)

    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())

    from ray._private.node import Node
    from ray._private.parameter import RayParams

    params = RayParams(
        gcs_address=arguments.address,
        node_ip_address=arguments.node_ip_address,
        temp_dir=arguments.temp_dir,
        dashboard_agent_listen_port=arguments.dashboard_agent_listen_port,
        metrics_export_port=arguments.metrics_export_port,
        node_manager_port=0,
    )
    node = Node(params, head=False, shutdown_at_exit=False, spawn_reaper=True)
    print("Ray runtime started.", flush=True)
    try:
        while not stop.wait(1.0):
            if node.dead_processes():  # the raylet died: the node is gone, say so by ending
                print(f"Ray processes of this node exited: {node.dead_processes()}", file=sys.stderr, flush=True)
                return 1
    finally:
        node.kill_all_processes(check_alive=False, allow_graceful=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
