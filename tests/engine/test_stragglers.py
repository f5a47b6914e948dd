"""A slow rank is named while the call runs: real gloo ranks through ``.distributed()`` and ``.submit()``, the
straggler watch looking every second (``DATABRICKS_AIR_STRAGGLER_SECONDS=1``)."""

from __future__ import annotations

import inspect
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from databricks.air import distributed
from mlflow_fixtures import only_run, store  # noqa: F401 - a fixture


def slow_rank_1(steps: int) -> None:
    """Rank 1 sleeps 0.2 s before each all-reduce; rank 0 waits for it."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    for _ in range(steps):
        if dist.get_rank() == 1:
            time.sleep(0.2)
        dist.all_reduce(tensor)
    dist.destroy_process_group()


def slow_rank(steps: int, slow: int, seconds: float = 0.2, then: int = 0) -> None:
    """Rank ``slow`` sleeps ``seconds`` before each of ``steps`` all-reduces; then ``then`` steps where every rank
    sleeps 20 ms."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    for _ in range(steps):
        if dist.get_rank() == slow:
            time.sleep(seconds)
        dist.all_reduce(tensor)
    for _ in range(then):
        time.sleep(0.02)
        dist.all_reduce(tensor)
    dist.destroy_process_group()


def balanced(steps: int, seconds: float, jitter: float) -> None:
    """Every rank sleeps ``seconds`` (times 1 +- ``jitter``, at random) before each all-reduce."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    chance = random.Random(int(os.environ["RANK"]))
    tensor = torch.ones(1)
    for _ in range(steps):
        time.sleep(seconds * (1 + chance.uniform(-jitter, jitter)))
        dist.all_reduce(tensor)
    dist.destroy_process_group()


class SlowReads:
    """A dataset of files whose reads take 0.2 s on rank 1 (a slow disk), and no time on rank 0."""

    def __init__(self, folder: str, count: int) -> None:
        self.paths = []
        for index in range(count):
            path = os.path.join(folder, f"item_{index}.txt")
            with open(path, "w") as stream:
                stream.write(str(index))
            self.paths.append(path)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Any:
        import torch

        with open(self.paths[index]) as stream:
            if os.environ["RANK"] == "1":
                time.sleep(0.2)  # the slow read
            return torch.tensor([float(stream.read())])


def slow_data_on_rank_1(folder: str, steps: int) -> None:
    import torch.distributed as dist

    from databricks.air.data import DataLoader

    dist.init_process_group("gloo")
    mine = os.path.join(folder, os.environ["RANK"])
    os.makedirs(mine, exist_ok=True)
    loader = DataLoader(SlowReads(mine, steps), batch_size=1, num_workers=0, metrics=False)
    for batch in loader:
        dist.all_reduce(batch)
    dist.destroy_process_group()


def _line(function: Callable[..., object], text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(index for index, line in enumerate(lines) if text in line)


@pytest.fixture(autouse=True)
def _often(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("DATABRICKS_AIR_STRAGGLER_SECONDS", "1")
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "0")
    monkeypatch.setenv("DATABRICKS_AIR_SYSTEM_METRICS", "0")
    yield


def _warnings(err: str) -> List[str]:
    return [line for line in err.splitlines() if "straggler" in line and line.startswith("databricks.air: rank")]


@pytest.mark.slow
def test_a_slow_rank_is_named_once_with_its_line_and_kept_in_the_run(
    store: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import mlflow

    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(slow_rank_1).submit(36)
    assert call.result() == [None, None]
    err = capfd.readouterr().err
    (warning,) = _warnings(err)
    sleep = _line(slow_rank_1, "time.sleep(0.2)")
    assert warning.startswith("databricks.air: rank 1 is a straggler: last into 100 % of "), warning
    assert " all_reduces, 0.2" in warning and " s late (median); the others wait for it " in warning
    assert warning.endswith(
        f"Where it was: tests/engine/test_stragglers.py:{sleep} (time.sleep); not in our DataLoader."
    )
    closing = next(line for line in err.splitlines() if " finished in " in line)
    assert closing.endswith("; rank 1 was a straggler (last into 100 % of all_reduces, 0.20 s late)"), closing

    (named,) = call.stragglers
    assert (named.rank, named.op, named.cause, named.ended_at) == (1, "all_reduce", "not in our DataLoader", None)
    assert named.late_seconds == pytest.approx(0.2, abs=0.03) and named.last_fraction >= 0.8

    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.run_id == call.run_id and run.data.tags["databricks.air.straggler"] == "1"
    late = client.get_metric_history(run.info.run_id, "straggler/late_seconds/rank_1")
    assert late and all(point.value == pytest.approx(0.2, abs=0.05) for point in late)
    assert [p.value for p in client.get_metric_history(run.info.run_id, "straggler/last_fraction/rank_1")][0] >= 0.8
    assert [p.value for p in client.get_metric_history(run.info.run_id, "straggler/late_seconds/rank_0")][0] == 0.0
    rate = client.get_metric_history(run.info.run_id, "collectives_per_second")
    assert rate and all(3 < point.value < 5.5 for point in rate)  # one all-reduce per 0.2 s step

    kept = json.loads((Path(call.log_dir) / "stragglers.json").read_text())
    assert [s["rank"] for s in kept["stragglers"]] == [1] and kept["windows"]
    assert kept["windows"][0]["ranks"]["1"]["last_fraction"] >= 0.8


@pytest.mark.slow
def test_a_rank_slow_in_our_data_loader_is_waiting_for_data(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    function = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(slow_data_on_rank_1)
    function.distributed(str(tmp_path), 30)
    (warning,) = _warnings(capfd.readouterr().err)
    asks = _line(slow_data_on_rank_1, "for batch in loader")
    sleep = _line(SlowReads.__getitem__, "time.sleep(0.2)")
    assert (
        f"Where it was: tests/engine/test_stragglers.py:{asks} (dataloader next: time.sleep at "
        f"tests/engine/test_stragglers.py:{sleep}); waiting for data 0.2"
    ) in warning, warning
    assert warning.endswith(" s per step.")


@pytest.mark.slow
@pytest.mark.parametrize("jitter", [0.0, 0.2], ids=["balanced", "jitter"])
def test_balanced_ranks_name_nobody(jitter: float, capfd: pytest.CaptureFixture[str]) -> None:
    function = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(balanced)
    call = function.submit(200 if jitter == 0 else 100, 0.02 if jitter == 0 else 0.05, jitter)
    call.result()
    err = capfd.readouterr().err
    assert "straggler" not in err and call.stragglers == []
    kept = json.loads((Path(call.log_dir) / "stragglers.json").read_text())
    assert kept["stragglers"] == [] and len(kept["windows"]) >= 2  # it looked, and found nobody


@pytest.mark.slow
def test_a_straggler_that_recovers_is_said_to_have_recovered(
    store: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    import mlflow

    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(slow_rank).submit(25, 1, then=200)
    call.result()
    lines = _warnings(capfd.readouterr().err)
    assert len(lines) == 2 and "rank 1 is a straggler" in lines[0], lines
    assert lines[1].startswith("databricks.air: rank 1 is no longer a straggler"), lines
    (named,) = call.stragglers
    assert named.ended_at is not None and named.ended_at > named.named_at
    run = mlflow.MlflowClient(store).get_run(call.run_id)
    assert "databricks.air.straggler" not in run.data.tags  # named, then taken off


@pytest.mark.slow
def test_the_slow_one_of_four_ranks_is_named(capfd: pytest.CaptureFixture[str]) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=4, timeout=120)(slow_rank).submit(24, 2)
    call.result()
    (warning,) = _warnings(capfd.readouterr().err)
    assert warning.startswith("databricks.air: rank 2 is a straggler"), warning
    assert [s.rank for s in call.stragglers] == [2]


@pytest.mark.slow
def test_zero_turns_the_watch_off(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_STRAGGLER_SECONDS", "0")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(slow_rank_1).submit(15)
    call.result()
    assert "straggler" not in capfd.readouterr().err and call.stragglers == []
    assert not (Path(call.log_dir) / "stragglers.json").exists()
