"""What a remote call asks of the cluster, and the environment each rank gets: the parts that need no cluster."""

from __future__ import annotations

import logging

import pytest

from databricks.air._ray.forwarded_environ import absolute_store, forwarded_environ
from databricks.air._engine.rank_environ import job_environ
from databricks.air._ray.rank_layout import Slot, arrange, rank_environ
from databricks.air._ray.request import RankRequest
from databricks.air._ray.resources import describe_nodes
from databricks.air._validation import resolve_remote as resolve
from databricks.air.compute import AcceleratorType
from databricks.air.exceptions import GPUValidationError


def node(ip: str, alive: bool = True, **resources: float) -> dict:
    return {"Alive": alive, "NodeManagerAddress": ip, "Resources": resources}


CPU_NODES = [node("10.0.0.1", CPU=8), node("10.0.0.2", CPU=8), node("10.0.0.3", alive=False, CPU=64)]
A10G_NODES = [
    node("10.0.0.1", CPU=8, GPU=1, **{"accelerator_type:A10G": 1}),
    node("10.0.0.2", CPU=8, GPU=1, **{"accelerator_type:A10G": 1}),
]
H100_NODES = [node("10.0.1.1", CPU=96, GPU=8, **{"accelerator_type:H100": 1})] * 2


# --- resolving the decorator's settings -----------------------------------------------------------------------------


def test_cpu_ranks_on_ray_need_a_count() -> None:
    assert resolve(4, AcceleratorType.CPU) == (4, AcceleratorType.CPU)
    with pytest.raises(GPUValidationError, match="needs num_accelerators"):
        resolve(None, AcceleratorType.CPU)


def test_cpu_mode_from_the_environment_runs_gpu_code_on_cpu_ranks(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_ACCELERATOR_TYPE", "CPU")
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        assert resolve(16, AcceleratorType.GPU_8xH100) == (16, AcceleratorType.CPU)
    assert "running 16 CPU rank(s) on the Ray cluster instead of accelerator_type=GPU_8xH100" in caplog.text


def test_gpu_ranks_follow_the_reference_rules() -> None:
    assert resolve(16, AcceleratorType.GPU_8xH100) == (16, AcceleratorType.GPU_8xH100)
    with pytest.raises(GPUValidationError, match="multiple of 8"):
        resolve(12, AcceleratorType.GPU_8xH100)
    with pytest.raises(GPUValidationError, match="needs accelerator_type"):
        resolve(8, None)


# --- bundles and what the cluster can hold --------------------------------------------------------------------------


def test_a_cpu_rank_reserves_one_cpu_and_the_live_nodes_are_the_limit() -> None:
    assert RankRequest(16, AcceleratorType.CPU).bundle(CPU_NODES) == {"CPU": 1.0}
    with pytest.raises(GPUValidationError) as caught:
        RankRequest(17, AcceleratorType.CPU).bundle(CPU_NODES)
    message = str(caught.value)
    assert "num_accelerators=17" in message and "has 16 CPU(s) in all" in message
    assert "2 node(s): 10.0.0.1 (CPU 8), 10.0.0.2 (CPU 8)" in message  # the dead node does not count
    assert "num_accelerators=16 or fewer" in message


def test_an_autoscaling_cluster_counts_what_it_may_grow_to() -> None:
    assert RankRequest(64, AcceleratorType.CPU).bundle(CPU_NODES, {"CPU": 128}) == {"CPU": 1.0}


def test_a_gpu_rank_reserves_one_gpu_on_a_node_of_its_model() -> None:
    bundle = RankRequest(16, AcceleratorType.GPU_8xH100).bundle(H100_NODES)
    assert bundle == {"GPU": 1.0, "accelerator_type:H100": 0.001}
    # Ray names AWS's A10 "A10G": either name selects the model.
    assert RankRequest(2, AcceleratorType.GPU_1xA10).bundle(A10G_NODES) == {"GPU": 1.0, "accelerator_type:A10G": 0.001}
    with pytest.raises(GPUValidationError, match="has 2 A10 GPU"):
        RankRequest(3, AcceleratorType.GPU_1xA10).bundle(A10G_NODES)


def test_an_autoscaling_cluster_may_add_nodes_of_the_model() -> None:
    may_grow = {"GPU": 16, "CPU": 200, "accelerator_type:H100": 2}
    assert RankRequest(16, AcceleratorType.GPU_8xH100).bundle(CPU_NODES, may_grow) == {
        "GPU": 1.0,
        "accelerator_type:H100": 0.001,
    }


def test_a_model_the_cluster_lacks_fails_naming_what_it_has() -> None:
    with pytest.raises(GPUValidationError) as caught:
        RankRequest(8, AcceleratorType.GPU_8xH100).bundle(A10G_NODES)
    message = str(caught.value)
    assert "accelerator_type:H100" in message
    assert "10.0.0.1 (CPU 8, GPU 1, accelerator_type:A10G)" in message
    with pytest.raises(GPUValidationError, match="no live nodes"):
        RankRequest(1, AcceleratorType.CPU).bundle([])


def test_describe_nodes_shows_fractional_resources() -> None:
    assert describe_nodes([node("h", CPU=0.5)]) == "1 node(s): h (CPU 0.5)"


# --- numbering ranks and their environment --------------------------------------------------------------------------


def test_ranks_are_numbered_node_by_node_from_rank_0s_node() -> None:
    # Ray put bundles 0 and 2 on node a, 1 and 3 on node b.
    slots = [Slot("a", "10.0.0.1"), Slot("b", "10.0.0.2"), Slot("a", "10.0.0.1"), Slot("b", "10.0.0.2")]
    places = arrange(slots)
    assert [(p.bundle, p.rank, p.local_rank, p.node_rank) for p in places] == [
        (0, 0, 0, 0),
        (2, 1, 1, 0),
        (1, 2, 0, 1),
        (3, 3, 1, 1),
    ]
    environ = rank_environ(places, 3, 29500)
    assert environ == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "ROLE_RANK": "3",
        "WORLD_SIZE": "4",
        "ROLE_WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
    }


def test_uneven_nodes_get_their_own_local_world_size() -> None:
    places = arrange([Slot("a", "h1"), Slot("a", "h1"), Slot("a", "h1"), Slot("b", "h2")])
    assert [rank_environ(places, r, 1)["LOCAL_WORLD_SIZE"] for r in range(4)] == ["3", "3", "3", "1"]


def test_gpu_ranks_of_a_node_see_the_nodes_gpus_in_local_rank_order() -> None:
    places = arrange([Slot("a", "h1", ("5",)), Slot("a", "h1", ("2",)), Slot("b", "h2", ("0",))])
    assert [rank_environ(places, r, 1)["CUDA_VISIBLE_DEVICES"] for r in range(3)] == ["5,2", "5,2", "0"]
    assert "CUDA_VISIBLE_DEVICES" not in rank_environ(arrange([Slot("a", "h1")]), 0, 1)


def test_job_variables_match_the_local_engine() -> None:
    first, second = job_environ(), job_environ()
    assert first["PYTHONUNBUFFERED"] == "1" and first["REPLICA_RANK"] == "0"
    assert first["TORCHELASTIC_RUN_ID"] != second["TORCHELASTIC_RUN_ID"]


def test_only_portable_variables_of_the_caller_travel(tmp_path) -> None:
    caller = {
        "PATH": "/caller/bin",
        "HOME": "/home/me",
        "CUDA_VISIBLE_DEVICES": "0",
        "MASTER_PORT": "1234",
        "MLFLOW_RUN_ID": "abc",
        "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db",
        "DATABRICKS_AIR_MLFLOW": "1",
        "NCCL_DEBUG": "INFO",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }
    forwarded = forwarded_environ(caller, str(tmp_path))
    assert forwarded == {
        "MLFLOW_RUN_ID": "abc",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db",
        "DATABRICKS_AIR_MLFLOW": "1",
        "NCCL_DEBUG": "INFO",
    }


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("sqlite:////abs/mlflow.db", "sqlite:////abs/mlflow.db"),
        ("file:mlruns", "file:/base/mlruns"),
        ("file:///abs/mlruns", "file:///abs/mlruns"),
        ("mlruns", "/base/mlruns"),
        ("http://mlflow:5000", "http://mlflow:5000"),
        ("databricks", "databricks"),
    ],
)
def test_a_relative_mlflow_store_is_named_from_the_callers_directory(uri: str, expected: str) -> None:
    assert absolute_store(uri, "/base") == expected
