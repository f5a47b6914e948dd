"""A rank server imports with the cyclic garbage collector paused, then freezes what it imported (``gc.freeze``): the
ranks it forks start with the collector on, and their collections never walk the server's heap again
(``bench/rank_gc.py``: a rank's own Python work took 3.6 times less CPU time)."""

from __future__ import annotations

import gc
import uuid
from typing import Tuple

import pytest

from databricks.air import distributed
from databricks.air._engine.frozen_imports import frozen_imports, import_for_life

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=180)


def collector_at_start() -> Tuple[bool, int, bool]:
    import gc
    import sys

    return gc.isenabled(), gc.get_freeze_count(), "torch._dynamo" in sys.modules


def builds_ddp() -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel  # imports torch._dynamo, which the server then learns

    dist.init_process_group("gloo")
    DistributedDataParallel(torch.nn.Linear(2, 2))  # freed here, before its process group
    dist.destroy_process_group()


def test_the_block_runs_with_the_collector_paused_and_what_exists_is_frozen_after() -> None:
    frozen_before = gc.get_freeze_count()
    try:
        assert gc.isenabled()
        with frozen_imports():
            assert not gc.isenabled()
            made = [[index] for index in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen_before + len(made)
        gc.disable()
        with pytest.raises(ValueError):  # an error in the block leaves the collector as it was: off here
            with frozen_imports():
                raise ValueError("in the block")
        assert not gc.isenabled()
    finally:
        gc.enable()
        if frozen_before == 0:
            gc.unfreeze()  # this test process's objects go back to the collector


def test_imports_for_life_say_what_failed_and_leave_the_collector_alone_when_all_are_loaded() -> None:
    frozen_before = gc.get_freeze_count()
    assert import_for_life(["json", "gc"]) == []  # imported already: nothing paused, nothing frozen
    assert gc.get_freeze_count() == frozen_before and gc.isenabled()
    try:
        (problem,) = import_for_life(["json", "air_test_no_such_module"])
        assert problem.startswith("could not preload air_test_no_such_module: ModuleNotFoundError")
        assert gc.isenabled()
    finally:
        if frozen_before == 0:
            gc.unfreeze()


def test_ranks_start_with_the_collector_on_and_the_servers_preloaded_modules_frozen() -> None:
    for enabled, frozen, _ in cpu2(collector_at_start).distributed():
        assert enabled
        assert frozen > 100_000, frozen  # torch's objects, among others; 0 without the freeze


def test_what_the_server_learned_from_its_ranks_is_frozen_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_AIR_TEST_SERVER", uuid.uuid4().hex)  # a fresh server of this test's own
    before = cpu2(collector_at_start).distributed()
    cpu2(builds_ddp).distributed()
    after = cpu2(collector_at_start).distributed()  # at once: the server imports torch._dynamo before it forks
    assert [loaded for _, _, loaded in before] == [False, False]
    assert [loaded for _, _, loaded in after] == [True, True]
    for (_, frozen_before, _), (enabled, frozen_after, _) in zip(before, after):
        assert enabled and frozen_after > frozen_before + 100_000, (frozen_before, frozen_after)
