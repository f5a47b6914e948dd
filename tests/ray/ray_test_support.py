"""Settings and helpers of the Ray tests: loopback only, and finding whatever a call might leave behind.

Importing this module sets the loopback variables: Ray 2.60 replaces
127.0.0.1 with the machine's interface address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set before ``ray``
is imported. They hold for this process and everything it starts: Ray's nodes, workers, and the ranks.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import time
import uuid
from typing import Any, Callable, List

# Short: Ray's socket paths live under it and must stay under 108 bytes. Removed when the test process exits.
RAY_TMPDIR = tempfile.mkdtemp(prefix="airray-", dir="/tmp" if os.path.isdir("/tmp") else None)
atexit.register(shutil.rmtree, RAY_TMPDIR, ignore_errors=True)
LOOPBACK_ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray's node-IP lookup then answers 127.0.0.1
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",  # else a local ray.init() turns token auth on and writes ~/.ray/auth_token
    "GLOO_SOCKET_IFNAME": "lo",
    "RAY_TMPDIR": RAY_TMPDIR,
}
os.environ.update(LOOPBACK_ENVIRONMENT)

CPUS_PER_NODE = 2
# Every rank of the session's calls carries it (through the job's runtime_env), so tests can find leftovers.
SESSION_MARKER = f"air-ray-tests-{uuid.uuid4().hex[:8]}"
LOOPBACK_ADDRESSES = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return bool(predicate())


def processes_with_marker(marker: str) -> List[str]:
    """Live processes whose environment has ``AIR_TEST_MARKER=<marker>``, as ``pid: command line``.

    The local engine's rank server is not counted: it is meant to stay, warm, for the next local call.
    """
    import psutil

    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("AIR_TEST_MARKER") != marker or process.status() == psutil.STATUS_ZOMBIE:
                continue
            command = " ".join(process.cmdline())
            if "databricks.air._engine.rank_server" not in command:
                found.append(f"{process.pid}: {command[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def live_rank_hosts() -> List[Any]:
    """Rank-host actors of the cluster that are not dead (the dashboard's state API)."""
    from ray.util.state import list_actors

    return [a for a in list_actors(filters=[("state", "!=", "DEAD")]) if a.class_name == "RankHost"]


def live_placement_groups() -> List[str]:
    import ray

    return [group for group, info in ray.util.placement_group_table().items() if info["state"] != "REMOVED"]


def assert_nothing_left() -> None:
    """No rank process, rank-host actor or placement group of this session's calls is left.

    Ray reports an actor dead, and its worker process exits, a moment after ``ray.kill``: hence the patience (a
    loaded CI machine may need many seconds); a check that passes returns at once.
    """
    assert wait_until(lambda: not processes_with_marker(SESSION_MARKER), 60), processes_with_marker(SESSION_MARKER)
    assert wait_until(lambda: not live_rank_hosts(), 60), live_rank_hosts()
    assert wait_until(lambda: not live_placement_groups(), 60), live_placement_groups()


def cluster_processes(cluster: Any) -> List[Any]:
    """Every live process of a ``ray.cluster_utils.Cluster``: its nodes' processes and everything below them."""
    import psutil

    found = {}
    for node in [cluster.head_node, *cluster.worker_nodes]:
        for infos in node.all_processes.values():
            for info in infos:
                try:
                    process = psutil.Process(info.process.pid)
                    for each in [process, *process.children(recursive=True)]:
                        found[each.pid] = each
                except psutil.NoSuchProcess:
                    continue
    return list(found.values())
