"""Latency of a ``remote=True`` call on a Ray cluster, against the same call on this machine and against Ray alone.

What it measures
    The cost of running ranks on Ray, not of the work they do. Workload (as in ``launch_latency.py``): 2 CPU ranks,
    each calls ``dist.init_process_group("gloo")``, does one ``all_reduce`` of a 1-element tensor, calls
    ``destroy_process_group()`` and returns a small dict. A two-node Ray cluster (2 CPUs per node) is started on
    127.0.0.1 in this process with ``ray.cluster_utils.Cluster``, and this process connects to it as the driver.
    Everything is measured in this one run, in this one process:

    a. anchor: the same function with ``@distributed(num_accelerators=2, accelerator_type="CPU")`` on this machine
       (the local engine); 1 warm-up call, then the median of 5 calls;
    b. ours: the same decorator with ``remote=True``: a placement group of 2 one-CPU bundles, 2 rank-host actors,
       each starting its rank as a child process, output streamed back, results collected, actors killed and the
       placement group removed; 1 warm-up call, then the median of 5 calls;
    c. anchor: Ray alone doing the same: a placement group of 2 one-CPU bundles, 2 plain actors that set the
       torchrun variables, run the same work in the actor process and return the value, then ``ray.kill`` and
       ``remove_placement_group``; 1 warm-up, then the median of 5;
    d. informational: starting the cluster (2 nodes) and connecting to it, once.

Targets
    remote call (b) <= Ray alone (c) + 1.5 s (the rank's own interpreter, which imports torch, and the polling).

Run: ``.venv/bin/python bench/ray_remote_latency.py`` (a few minutes on 2 vCPUs). Nothing asserts on time; the
script prints a table and PASS/MISS per target. It exits non-zero only if a result is wrong.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs

_SCRATCH = tempfile.mkdtemp(prefix="airray-bench-", dir="/tmp" if os.path.isdir("/tmp") else None)
# One machine, loopback only (see the tests' ray_test_support.py): set before Ray is imported.
os.environ.update(
    {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "GLOO_SOCKET_IFNAME": "lo",
        "RAY_TMPDIR": _SCRATCH,
        "DATABRICKS_AIR_MLFLOW": "0",
        "DATABRICKS_AIR_LOG_DIR": os.path.join(_SCRATCH, "logs"),
    }
)

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

from databricks.air import distributed  # noqa: E402
from databricks.air.ray import ray_init  # noqa: E402

RUNS = 5


def work(tag: str) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return {"tag": tag, "rank": int(os.environ["RANK"]), "sum": value.item()}


class PlainRank:
    """Ray alone: an actor that is one rank."""

    def port(self) -> int:
        import socket

        with socket.socket() as probe:
            probe.bind(("", 0))
            return int(probe.getsockname()[1])

    def run(self, rank: int, port: int) -> Dict[str, Any]:
        os.environ.update({"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        return work("ray")


def plain_ray_call() -> List[Dict[str, Any]]:
    group = placement_group([{"CPU": 1}] * 2, strategy="PACK")
    ray.get(group.ready())
    actor = ray.remote(PlainRank)
    ranks = [
        actor.options(num_cpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
        for i in range(2)
    ]
    try:
        port = ray.get(ranks[0].port.remote())
        return ray.get([r.run.remote(i, port) for i, r in enumerate(ranks)])
    finally:
        for r in ranks:
            ray.kill(r)
        remove_placement_group(group)


def timed(call: Callable[[], List[Dict[str, Any]]], tag: str) -> float:
    call()  # warm-up
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        values = call()
        times.append(time.perf_counter() - started)
        if [v["sum"] for v in values] != [3.0, 3.0] or [v["rank"] for v in values] != [0, 1]:
            sys.exit(f"{tag}: wrong result {values}")
    return statistics.median(times)


def main() -> None:
    for key, value in _machine.machine().items():
        print(f"{key:>12}: {value}")
    started = time.perf_counter()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "node_ip_address": "127.0.0.1",
            "num_cpus": 2,
            "object_store_memory": 200 << 20,
            "include_dashboard": False,
        },
    )
    try:
        cluster.add_node(node_ip_address="127.0.0.1", num_cpus=2, object_store_memory=200 << 20)
        cluster.wait_for_nodes()
        os.chdir(_SCRATCH)
        ray_init(address=cluster.address, runtime_env={"working_dir": None})
        cluster_start = time.perf_counter() - started

        local = distributed(num_accelerators=2, accelerator_type="CPU", timeout=300)(work)
        remote = distributed(num_accelerators=2, accelerator_type="CPU", remote=True, timeout=300)(work)
        a = timed(lambda: local.distributed("local"), "local")
        b = timed(lambda: remote.distributed("remote"), "remote")
        c = timed(plain_ray_call, "ray alone")
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(_SCRATCH, ignore_errors=True)

    print()
    print(f"{'':2}{'measurement':<52}{'seconds':>10}")
    print(f"a {'local call, 2 CPU ranks (median of 5)':<52}{a:>10.2f}")
    print(f"b {'remote=True call on Ray, 2 CPU ranks (median of 5)':<52}{b:>10.2f}")
    print(f"c {'Ray alone: placement group + 2 actors (median of 5)':<52}{c:>10.2f}")
    print(f"d {'start a 2-node cluster and connect (once)':<52}{cluster_start:>10.2f}")
    print()
    print(f"remote / local: {b / a:.1f}x;  remote / Ray alone: {b / c:.2f}x;  remote - Ray alone: {b - c:+.2f} s")
    print(f"target b <= c + 1.5 s: {'PASS' if b <= c + 1.5 else 'MISS'}")


if __name__ == "__main__":
    main()
