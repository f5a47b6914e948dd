"""The hang report for ``remote=True``: each rank's stacks and collectives are taken on its own node."""

from __future__ import annotations

import _thread
import os
import sys
import threading
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from ray_test_support import assert_nothing_left, wait_until
from databricks.air import distributed

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ranks on Ray cannot import this module

RANKS = 4


def rank_three_sleeps(started_dir: str) -> None:
    import os
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    open(os.path.join(started_dir, os.environ["RANK"]), "w").close()
    if dist.get_rank() == 3:
        time.sleep(300)
    dist.all_reduce(tensor)


@pytest.mark.slow
def test_an_interrupt_reports_where_every_rank_on_every_node_was(
    connected: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_SNAPSHOT_SECONDS", "5")
    started = tmp_path / "started"
    started.mkdir()
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(rank_three_sleeps)

    def interrupt_once_all_ranks_wait() -> None:
        if wait_until(lambda: len(os.listdir(started)) == RANKS, 120):
            wait_until(lambda: False, 1.0)  # into the second all-reduce, or the sleep
            _thread.interrupt_main()

    threading.Thread(target=interrupt_once_all_ranks_wait, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        function.distributed(str(started))
    err = capfd.readouterr().err
    report = err.split("databricks.air: interrupted. Where the ranks were:\n", 1)[1]
    lines = report.splitlines()
    for rank in (0, 1, 2):
        assert f"rank {rank}: waiting in all_reduce #2 of the default group" in lines[rank]
    assert "rank 3: running its own code (1 collective completed)" in lines[3] and "time.sleep(300)" in lines[3]
    assert "Rank 3 is behind: it completed 1 collective of the default group and is in time.sleep" in report
    assert "ranks 0, 1 and 2 wait in all_reduce #2" in report
    assert_nothing_left()


def rank_three_is_slow(steps: int) -> None:
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    for _ in range(steps):
        if dist.get_rank() == 3:
            time.sleep(0.2)
        dist.all_reduce(tensor)
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_slow_rank_on_another_node_is_named_on_the_callers_clock(
    connected: Any, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setenv("DATABRICKS_AIR_STRAGGLER_SECONDS", "1")
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(rank_three_is_slow)
    function.distributed(40)
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if "is a straggler" in line]
    assert len(warnings) == 1 and warnings[0].startswith("databricks.air: rank 3 is a straggler: last into "), err
    assert "(time.sleep); not in our DataLoader." in warnings[0]
    kept = json.loads((Path(function.last_log_dir) / "stragglers.json").read_text())
    assert kept["clock"].startswith("each rank's clock offset from the caller's, measured at the first look")
    assert [s["rank"] for s in kept["stragglers"]] == [3]
    assert_nothing_left()
