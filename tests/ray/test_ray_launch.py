"""``@ray_launch``: a Ray cluster over the ranks of a call, the function run once as its driver, nothing left after."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import cloudpickle
import pytest

from ray_test_support import assert_nothing_left, processes_with_marker, wait_until
from databricks.air import ray_launch
from databricks.air.exceptions import GPUTypeError, RayInitializationError, RuntimeConfigurationError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ranks cannot import this test module


def squares_on_the_cluster(n: int) -> dict:
    import os

    import ray

    @ray.remote(num_cpus=1)
    def square(x: int) -> int:
        return x * x

    nodes = [node for node in ray.nodes() if node["Alive"]]
    return {
        "total": sum(ray.get([square.remote(i) for i in range(n)])),
        "nodes": len(nodes),
        "node_ip": nodes[0]["NodeManagerAddress"],
        "address": os.environ["RAY_ADDRESS"],
    }


@pytest.mark.slow
def test_rank_0_drives_a_ray_job_on_the_cluster_of_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = "ray-launch-test"
    monkeypatch.setenv("AIR_TEST_MARKER", marker)  # every rank, and every Ray process it starts, inherits it
    job = ray_launch(num_accelerators=2, accelerator_type="CPU", timeout=300)(squares_on_the_cluster)
    values = job.distributed(4)
    assert values[1] is None
    assert values[0]["total"] == 0 + 1 + 4 + 9
    assert values[0]["nodes"] == 1  # one machine: one node, started by rank 0
    assert values[0]["node_ip"] == "127.0.0.1"
    assert values[0]["address"].startswith("127.0.0.1:")
    # The cluster it started is gone: no Ray process, no rank, nothing listening on its head port.
    assert wait_until(lambda: not processes_with_marker(marker), 20), processes_with_marker(marker)


LISTENERS_OF_A_LAUNCHED_CLUSTER = """
import json
from databricks.air.ray import ray_launch

@ray_launch(num_accelerators=1, accelerator_type="CPU", timeout=300)
def listeners():
    import os, psutil, ray
    ray.get(ray.remote(lambda: 1).remote())  # a worker process too
    marker = os.environ["AIR_LISTEN_TEST"]
    ours = {}
    for process in psutil.process_iter():
        try:
            if process.environ().get("AIR_LISTEN_TEST") == marker:
                ours[process.pid] = process.name()
        except psutil.Error:
            pass
    return sorted({(ours[c.pid], c.laddr.ip) for c in psutil.net_connections("inet")
                   if c.status == psutil.CONN_LISTEN and c.pid in ours})

print(json.dumps(listeners.distributed()[0]))
"""


@pytest.mark.slow
def test_the_cluster_of_a_calls_ranks_on_one_machine_listens_on_loopback_only(tmp_path: Path) -> None:
    """Started from a process without the Ray tests' loopback settings (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``), as a
    user's script is: every listening socket of the head's processes (those that inherited this test's marker) is
    on 127.0.0.1, read with psutil (nothing connects elsewhere). Its GCS, raylet and workers listened on every
    interface (found by sampling ``ss`` while the scaling page's example ran)."""
    import json
    import os
    import uuid

    drop = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR", "RAY_ADDRESS", "AIR_TEST_MARKER")
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    environ.update(
        AIR_LISTEN_TEST=uuid.uuid4().hex,
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        DATABRICKS_AIR_MLFLOW="0",
    )
    done = subprocess.run(
        [sys.executable, "-c", LISTENERS_OF_A_LAUNCHED_CLUSTER],
        cwd=tmp_path,
        env=environ,
        text=True,
        capture_output=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"gcs_server", "raylet"} <= {name for name, _ in found}, found
    assert {address for _, address in found} <= {"127.0.0.1", "::ffff:127.0.0.1"}, found


def where_tasks_run() -> dict:
    import os

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=1)
    def node_id() -> str:
        return ray.get_runtime_context().get_node_id()

    alive = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    pinned = [
        node_id.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote() for node in alive
    ]
    return {
        "nodes": alive,
        "ran_on": sorted(ray.get(pinned)),
        "address": os.environ["RAY_ADDRESS"],
        "call_nodes": os.environ["GROUP_WORLD_SIZE"],
    }


@pytest.mark.slow
def test_remote_ranks_on_two_nodes_make_a_ray_cluster_of_two_nodes(connected: object) -> None:
    """4 ranks on the session's cluster, 2 per node: rank 0 starts the head, node 1's first rank joins it."""
    values = ray_launch(num_accelerators=4, accelerator_type="CPU", remote=True, timeout=300)(where_tasks_run)
    found = values.distributed()
    assert found[1:] == [None, None, None]
    assert found[0]["call_nodes"] == "2"
    assert len(found[0]["nodes"]) == 2 and found[0]["ran_on"] == found[0]["nodes"]  # a task ran on each node
    session_nodes = {node["NodeID"] for node in connected_nodes()}
    assert not session_nodes & set(found[0]["nodes"])  # a cluster of the call's own, not the session's
    assert found[0]["address"].startswith("127.0.0.1:")
    assert_nothing_left()  # the ranks, their Ray nodes and the placement group are gone


def test_a_worker_node_that_ends_before_the_driver_fails_its_rank_with_its_own_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from databricks.air._ray import rank_cluster

    class Store:  # rank 0's rendezvous store: the head's address, and the driver never done
        def get(self, key: str) -> bytes:
            assert key == rank_cluster.HEAD_KEY
            return b"127.0.0.1:6379"

        def check(self, keys: list) -> bool:
            return False

    log = tmp_path / "ray-start.log"
    log.write_text("\x1b[31mthe head refused this node\x1b[39m\n")
    refused = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    refused.wait()
    node = rank_cluster.RayNode(refused, str(tmp_path), "127.0.0.1:6379")
    monkeypatch.setattr(rank_cluster.RayNode, "start", classmethod(lambda cls, head_ip, join=None: node))
    monkeypatch.setattr(rank_cluster.RayNode, "stop", lambda self: None)
    monkeypatch.setenv("NODE_RANK", "1")
    with pytest.raises(RayInitializationError) as caught:
        rank_cluster._serve_worker_node(Store())
    message = str(caught.value)
    assert "the Ray worker node of NODE_RANK 1 joining 127.0.0.1:6379 ended with exit code 1" in message
    assert "the head refused this node" in message and "\x1b" not in message


def connected_nodes() -> list:
    import ray

    return [node for node in ray.nodes() if node["Alive"]]


def test_arguments_are_checked_against_the_users_signature() -> None:
    job = ray_launch(num_accelerators=2, accelerator_type="CPU", timeout=60)(squares_on_the_cluster)
    with pytest.raises(TypeError):
        job.distributed(1, 2)
    assert "squares_on_the_cluster" in repr(job)


def test_ray_launch_has_the_decorators_validation_and_deprecations(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from databricks.air import _validation

    monkeypatch.setattr(_validation, "_NOTED", set())  # each note is given once per process: a test before may have
    with pytest.warns(FutureWarning, match=r"use num_accelerators=2 in @ray_launch") as record:
        job = ray_launch(gpus=2, accelerator_type="CPU")(squares_on_the_cluster)
    # attributed to the user's line (importing Ray for the first time in a process may warn too)
    ours = [warning for warning in record if "use num_accelerators=2" in str(warning.message)]
    assert [warning.filename for warning in ours] == [__file__]
    assert job.num_accelerators == 2
    with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
        ray_launch(gpus=2, num_accelerators=2)
    with pytest.raises(GPUTypeError):
        ray_launch(num_accelerators=2, accelerator_type="TPU")
    with pytest.raises(RuntimeConfigurationError, match="timeout"):
        ray_launch(timeout=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="databricks.air"):
            ray_launch(num_accelerators=1, accelerator_type="CPU", timeout=60)(squares_on_the_cluster)
    assert "one rank" in caplog.text
    with pytest.raises(RuntimeConfigurationError, match="already decorated"):
        ray_launch(num_accelerators=2, accelerator_type="CPU")(job)
