"""A rank never hangs in teardown because a DDP model outlived ``destroy_process_group()``.

Without the engine's guard (``databricks_air/_engine/process_groups.py``) about one call in two of
``train_then_destroy_with_the_model_alive`` on 4 CPU ranks hangs for good on a 2-core machine: the user's frame
frees the model at ``return``, DDP's reducer drops the last reference to the gloo group with the GIL held, and the
group's destructor joins a worker thread that waits for the GIL. The first test makes enough calls that a missing
guard fails it (as a ``LocalExecutionTimeoutError``) with high probability; the others check the guard itself.
"""

from __future__ import annotations

import os
from typing import Dict

import pytest

from databricks.air import distributed
from databricks.air._engine import process_groups

CALLS = 7
RANKS = 4
CALL_TIMEOUT = 60  # a call takes about 2 s; a hang is for good, so any margin works


def train_then_destroy_with_the_model_alive(steps: int) -> Dict[str, object]:
    """The pattern the examples used to show: DDP training, a DCP-capable rank, destroy, return."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint
    from torch.nn.parallel import DistributedDataParallel

    import databricks.air.data  # noqa: F401

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP's all-reduce: its work outlives the step on a gloo thread for a moment
        optimizer.step()
    weight = model.module.weight.detach().clone()
    dist.destroy_process_group()  # the model is still alive: it is freed when this frame returns
    return {"weight": weight}


@pytest.fixture(autouse=True)
def _one_rank_server_with_the_data_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank server imports ``databricks.air.data`` (and DCP, dynamo...) once; every test here shares it.

    Ranks that hold those modules, as a training rank does, hit the race far more often than bare ones.
    """
    monkeypatch.setenv("DATABRICKS_AIR_PRELOAD", "databricks.air.data")


@pytest.mark.slow
def test_a_model_alive_at_destroy_process_group_never_hangs_the_rank() -> None:
    # 4 ranks on 2 cores: a gloo thread that waits for a core makes the race, hence the hang, more likely.
    run = distributed(accelerator_type="CPU", num_accelerators=RANKS, timeout=CALL_TIMEOUT)(
        train_then_destroy_with_the_model_alive
    )
    for _ in range(CALLS):
        results = run.distributed(2)  # LocalExecutionTimeoutError if a rank hangs
        assert len(results) == RANKS and all(r["weight"].equal(results[0]["weight"]) for r in results)


def destroy_a_subgroup_then_the_world() -> Dict[str, object]:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    dist.init_process_group("gloo")
    pair = dist.new_group([0, 1])
    dist.destroy_process_group(pair)
    after_subgroup = len(process_groups.kept_groups)
    dist.destroy_process_group()
    return {
        "wrapped": dist.destroy_process_group is distributed_c10d.destroy_process_group,
        "name": dist.destroy_process_group.__name__,
        "after_subgroup": after_subgroup,
        "after_world": len(process_groups.kept_groups),
        "initialized": dist.is_initialized(),
        "start": os.environ.get("DATABRICKS_AIR_START_METHOD", "fork"),
    }


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_destroyed_groups_are_shut_down_by_torch_and_kept_until_the_rank_exits(
    monkeypatch: pytest.MonkeyPatch, start_method: str
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_START_METHOD", start_method)
    run = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(destroy_a_subgroup_then_the_world)
    for result in run.distributed():
        assert result["wrapped"] and result["name"] == "destroy_process_group"
        assert result["after_subgroup"] == 1  # the subgroup alone
        assert result["after_world"] >= 2  # then the default group too
        assert result["initialized"] is False  # torch's own destroy still ran
        assert result["start"] == start_method


@pytest.mark.slow
def test_a_fresh_interpreter_wraps_torch_when_it_is_imported(run_script) -> None:
    done = run_script(
        """
        import inspect
        import sys

        from databricks.air._engine import process_groups

        process_groups.keep_destroyed_groups()
        assert "torch" not in sys.modules
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        assert dist.destroy_process_group is distributed_c10d.destroy_process_group
        assert getattr(dist.destroy_process_group, "__databricks_air_keeps_groups__", False)
        assert "def destroy_process_group" in inspect.getsource(inspect.unwrap(dist.destroy_process_group))
        assert not any(isinstance(f, process_groups._WrapOnImport) for f in sys.meta_path)  # removed once used
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
