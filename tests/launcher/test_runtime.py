"""databricks.air.runtime: the rank helpers, from the environment and from a real torch.distributed group."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys

import pytest

from databricks.air import distributed, runtime
from databricks.air.exceptions import MissingEnvironmentError, RuntimeConfigurationError

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)

# (helper, variable, default)
ENV_HELPERS = [
    (runtime.get_local_rank, "LOCAL_RANK", 0),
    (runtime.get_local_world_size, "LOCAL_WORLD_SIZE", 1),
    (runtime.get_node_rank, "NODE_RANK", 0),
    (runtime.get_world_size, "WORLD_SIZE", 1),
    (runtime.get_global_rank, "RANK", 0),
    (runtime.get_replica_rank, "REPLICA_RANK", 0),
]
IDS = [variable for _, variable, _ in ENV_HELPERS]


@pytest.mark.parametrize("helper, variable, default", ENV_HELPERS, ids=IDS)
def test_unset_variable_gives_the_default(helper, variable, default, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(variable, raising=False)
    value = helper()
    assert value == default and type(value) is int


@pytest.mark.parametrize("helper, variable, default", ENV_HELPERS, ids=IDS)
def test_set_variable_is_returned_as_int(helper, variable, default, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, "7")
    value = helper()
    assert value == 7 and type(value) is int
    monkeypatch.setenv(variable, " 3 ")
    assert helper() == 3


@pytest.mark.parametrize("helper, variable, default", ENV_HELPERS, ids=IDS)
@pytest.mark.parametrize("raw", ["two", "", "1.5"])
def test_non_integer_variable_is_a_configuration_error(
    helper, variable, default, raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(RuntimeConfigurationError, match=f"{variable}={raw!r}"):
        helper()


def test_without_torch_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    assert (runtime.get_world_size(), runtime.get_global_rank()) == (4, 2)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert (runtime.get_world_size(), runtime.get_global_rank()) == (1, 0)


def test_without_torch_distributed_the_environment_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "is_available", lambda: False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert (runtime.get_world_size(), runtime.get_global_rank()) == (4, 3)


def test_get_node_ip_is_an_ipv4_address() -> None:
    address = runtime.get_node_ip()
    assert isinstance(address, str)
    assert isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address)


def test_get_node_ip_falls_back_to_the_default_route_then_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_DEFAULT_INTERFACE", "no-such-if0")
    route = runtime.get_node_ip()
    ipaddress.IPv4Address(route)
    monkeypatch.setattr(runtime, "_default_route_address", lambda: None)
    assert runtime.get_node_ip() == "127.0.0.1"


def test_get_node_ip_reads_an_interface_by_name() -> None:
    assert runtime._interface_address("lo") in (None, "127.0.0.1")  # None only where lo has no IPv4 address
    assert runtime._interface_address("no-such-if0") is None


def test_importing_runtime_does_not_import_torch() -> None:
    code = "import sys, databricks.air.runtime, databricks.air.utils; print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_public_names() -> None:
    assert set(runtime.__all__) == {
        "get_local_rank",
        "get_local_world_size",
        "get_node_rank",
        "get_world_size",
        "get_global_rank",
        "get_replica_rank",
        "get_node_ip",
        "get_restart_count",  # ours, for max_restarts (the reference never restarts a call)
    }
    for name in runtime.__all__:
        assert getattr(runtime, name).__doc__


# --- inside real ranks --------------------------------------------------------------------------------------------


def helpers_against_dist() -> dict:
    import torch.distributed as dist

    before = (runtime.get_world_size(), runtime.get_global_rank())
    dist.init_process_group("gloo")
    group = dist.new_group([1])
    values = {
        "before": before,
        "world_size": (runtime.get_world_size(), dist.get_world_size()),
        "rank": (runtime.get_global_rank(), dist.get_rank(), int(os.environ["RANK"])),
        "group_rank": runtime.get_global_rank(group),
        "local": (runtime.get_local_rank(), runtime.get_local_world_size()),
        "node": (runtime.get_node_rank(), runtime.get_replica_rank()),
        "ip": runtime.get_node_ip(),
    }
    dist.destroy_process_group()
    return values


def test_helpers_agree_with_torch_distributed_in_ranks() -> None:
    results = cpu2(helpers_against_dist).distributed()
    for rank, values in enumerate(results):
        assert values["before"] == (2, rank)
        assert values["world_size"] == (2, 2)
        assert values["rank"] == (rank, rank, rank)
        assert values["group_rank"] == (0 if rank == 1 else -1)
        assert values["local"] == (rank, 2)
        assert values["node"] == (0, 0)
        ipaddress.IPv4Address(values["ip"])


def rank_changed_after_init() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    os.environ["RANK"] = str(dist.get_rank() + 5)
    return runtime.get_global_rank()


def test_rank_that_disagrees_with_the_process_group_is_a_configuration_error() -> None:
    with pytest.raises(RuntimeConfigurationError, match=r"rank [01] but environment variable RANK=[56]"):
        cpu2(rank_changed_after_init).distributed()


def world_size_changed_after_init() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    os.environ["WORLD_SIZE"] = "3"
    return runtime.get_world_size()


def test_world_size_that_disagrees_with_the_process_group_is_a_configuration_error() -> None:
    with pytest.raises(RuntimeConfigurationError, match=r"world_size 2 but environment variable WORLD_SIZE=3"):
        cpu2(world_size_changed_after_init).distributed()


def world_size_removed_after_init() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    del os.environ["WORLD_SIZE"]
    return runtime.get_world_size()


def test_missing_world_size_with_a_process_group_is_a_missing_environment_error() -> None:
    with pytest.raises(MissingEnvironmentError, match="WORLD_SIZE is not set"):
        cpu2(world_size_removed_after_init).distributed()


def rank_removed_after_init() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    del os.environ["RANK"]
    return runtime.get_global_rank()


def test_missing_rank_with_a_process_group_is_a_missing_environment_error() -> None:
    with pytest.raises(MissingEnvironmentError, match="RANK is not set"):
        distributed(num_accelerators=1, accelerator_type="CPU", timeout=120)(rank_removed_after_init).distributed()


def test_the_restart_count_is_torchruns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert runtime.get_restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert runtime.get_restart_count() == 2
