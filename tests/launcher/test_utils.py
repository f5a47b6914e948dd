"""databricks.air.utils: initialize_dist, barrier and all_gather_object, in real CPU ranks and without a group.

No process group is ever created in the pytest process itself: every initialisation runs inside a CPU call.
"""

from __future__ import annotations

import os

import pytest

from databricks.air import distributed, utils
from databricks.air.exceptions import RuntimeConfigurationError

cpu1 = distributed(num_accelerators=1, accelerator_type="CPU", timeout=120)
cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)

TORCHRUN_VARIABLES = ["NODE_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK"]


@pytest.fixture
def no_rank_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_public_names() -> None:
    assert utils.__all__ == ["initialize_dist", "barrier", "all_gather_object"]
    for name in utils.__all__:
        assert getattr(utils, name).__doc__


# --- without a process group (pytest process) -----------------------------------------------------------------


def test_no_process_group_in_the_test_process() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "mps", "", 3])
def test_unsupported_device_is_a_value_error(device: object) -> None:
    with pytest.raises(ValueError, match=r"Unsupported device .*\"cuda\".*\"cpu\""):
        utils.initialize_dist(device)  # type: ignore[arg-type]


def test_unsupported_torch_device_is_a_value_error() -> None:
    import torch

    with pytest.raises(ValueError, match="'meta'"):
        utils.initialize_dist(torch.device("meta"))


@pytest.mark.parametrize("timeout", [0, -1.0, "10", True])
def test_bad_timeout_is_a_value_error(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        utils.initialize_dist("cpu", timeout=timeout)  # type: ignore[arg-type]


def test_non_integer_rank_variable_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setenv("LOCAL_RANK", "first")
    with pytest.raises(RuntimeConfigurationError, match="LOCAL_RANK='first'"):
        utils.initialize_dist("cpu")
    assert not dist.is_initialized()


def test_cuda_without_cuda_is_a_runtime_error(no_rank_environment: None) -> None:
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    for device in ("cuda", "gpu", "cuda:0", torch.device("cuda", 0)):
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            utils.initialize_dist(device)
    assert not dist.is_initialized()


def test_single_rank_without_group(no_rank_environment: None) -> None:
    obj = {"a": [1, 2]}
    gathered = utils.all_gather_object(obj)
    assert gathered == [obj] and gathered[0] is obj
    assert utils.barrier() is None


def test_single_rank_with_world_size_one_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert utils.all_gather_object(5) == [5]
    utils.barrier()


def test_several_ranks_without_group_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"world size is 2.*initialize_dist\(\).*init_process_group"):
        utils.all_gather_object("x")
    with pytest.raises(RuntimeError, match=r"world size is 2.*initialize_dist\(\).*init_process_group"):
        utils.barrier()


def test_a_group_without_a_process_group_is_a_runtime_error(no_rank_environment: None) -> None:
    with pytest.raises(RuntimeError, match="initialize_dist"):
        utils.all_gather_object("x", group=object())
    with pytest.raises(RuntimeError, match="initialize_dist"):
        utils.barrier(group=object())


# --- inside real ranks ------------------------------------------------------------------------------------------


def initialize_without_environment(device: object) -> dict:
    import torch
    import torch.distributed as dist

    for name in TORCHRUN_VARIABLES + ["MASTER_ADDR", "MASTER_PORT"]:
        os.environ.pop(name, None)
    resolved = utils.initialize_dist(device)
    world = dist.group.WORLD
    again = utils.initialize_dist(device)
    result = {
        "device": str(resolved),
        "again": str(again),
        "same_group": dist.group.WORLD is world,
        "backend": str(dist.get_backend()),
        "world_size": dist.get_world_size(),
        "rank": dist.get_rank(),
        "env": {name: os.environ.get(name) for name in TORCHRUN_VARIABLES},
        "gathered": utils.all_gather_object({"rank": dist.get_rank()}),
        "cuda": torch.cuda.is_available(),
    }
    utils.barrier()
    dist.destroy_process_group()
    return result


def test_initialize_dist_without_environment_creates_a_one_rank_group() -> None:
    [result] = cpu1(initialize_without_environment).distributed("cpu")
    assert result["device"] == result["again"] == "cpu"
    assert result["same_group"]
    assert result["backend"] == "gloo"
    assert (result["world_size"], result["rank"]) == (1, 0)
    assert result["env"] == {
        "NODE_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
    }
    assert result["gathered"] == [{"rank": 0}]


def test_initialize_dist_default_device_follows_cuda_availability() -> None:
    [result] = cpu1(initialize_without_environment).distributed(None)
    if result["cuda"]:
        assert (result["device"], result["backend"]) == ("cuda:0", "nccl")
    else:
        assert (result["device"], result["backend"]) == ("cpu", "gloo")
    assert (result["world_size"], result["rank"]) == (1, 0)


def initialize_twice_then_other_backend() -> str:
    import torch
    import torch.distributed as dist

    assert utils.initialize_dist(torch.device("cpu"), timeout=60) == torch.device("cpu")
    assert utils.initialize_dist("CPU") == torch.device("cpu")
    try:
        utils.initialize_dist("cuda")
    except RuntimeError as error:
        message = str(error)
    else:
        message = ""
    dist.destroy_process_group()
    return message


def test_initialize_dist_is_a_no_op_once_initialised_and_refuses_another_backend() -> None:
    [message] = cpu1(initialize_twice_then_other_backend).distributed()
    assert "'gloo'" in message and "'nccl'" in message


def gather_in_ranks() -> dict:
    import torch.distributed as dist

    device = utils.initialize_dist("cpu", timeout=60)
    rank = int(os.environ["RANK"])
    gathered = utils.all_gather_object({"rank": rank})
    utils.barrier()
    utils.initialize_dist("cpu")  # no-op
    odd = dist.new_group([1])
    in_group = utils.all_gather_object(rank * 10, group=odd) if rank == 1 else None
    if rank == 1:
        utils.barrier(group=odd)
    utils.barrier()
    result = {"device": str(device), "gathered": gathered, "in_group": in_group, "backend": str(dist.get_backend())}
    dist.destroy_process_group()
    return result


def test_two_ranks_gather_in_rank_order() -> None:
    results = cpu2(gather_in_ranks).distributed()
    for rank, result in enumerate(results):
        assert result["device"] == "cpu"
        assert result["backend"] == "gloo"
        assert result["gathered"] == [{"rank": 0}, {"rank": 1}]
    assert results[1]["in_group"] == [10]
