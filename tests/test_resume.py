"""Resuming after a failure, end to end (issue 28): a 2-rank DDP loop over a ``UCVolumeDataset`` that saves with
``Checkpointer`` every 20 steps, run once without a fault, then with ``max_restarts=1`` and rank 1 killed, either at
step 50 or in the middle of writing the checkpoint of step 40.

What each restarted run must show against the uninterrupted one: the call returns; the final weights are the same,
bit for bit; every file is trained on exactly once per epoch, counting each step's last record (the steps after the
last checkpoint ran twice: once in attempt 0, lost, and again in attempt 1); at most 20 steps are recomputed; the
second attempt sees ``get_restart_count() == 1``; no process is left; a torn checkpoint is never restored; and the
call's one MLflow run says it restarted once.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil
import pytest
import torch

from mlflow_fixtures import only_run, store  # noqa: F401 - fixture
from process_helpers import server_descendants, wait_until
from databricks.air import distributed

FILES = 30  # 15 a rank, one file a step: 15 steps an epoch
EPOCHS = 4  # 60 steps in all
EVERY = 20  # checkpoints at steps 20 (epoch 1), 40 (epoch 2) and 60
KILL_AT = 50  # in epoch 3: attempt 1 resumes from step 40, in the epoch before
FEATURES = 4


def _train(data: str, checkpoints: str, records: str, fault: Optional[str]) -> Dict[str, Any]:
    """Rank body: DDP with Adam over the folder's files, one file a rank a step, a checkpoint every ``EVERY`` steps.

    Each rank appends ``[step, epoch, sample ids]`` for every step it trains to ``records/rank<R>_attempt<A>.jsonl``.
    ``fault`` (attempt 0, rank 1 only): ``"kill"`` SIGKILLs the rank after step ``KILL_AT``; ``"torn"`` SIGKILLs it
    half way through writing its file of the checkpoint of step 40.
    """
    import json
    import os
    import signal

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from databricks.air.data import Checkpointer, DataLoader, UCVolumeDataset
    from databricks.air.runtime import get_restart_count

    attempt = get_restart_count()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(UCVolumeDataset(data, shuffle=True, seed=7, cache=False), batch_size=1, num_workers=1)
    checkpointer = Checkpointer(checkpoints, keep=2, every=EVERY)
    start = checkpointer.restore(model=model, optimizer=optimizer, loader=loader) or 0
    faulty = fault is not None and attempt == 0 and rank == 1

    step = start
    with open(os.path.join(records, f"rank{rank}_attempt{attempt}.jsonl"), "a", encoding="utf-8") as record:
        for epoch in range(loader.epoch, EPOCHS):
            loader.set_epoch(epoch)
            for paths in loader:
                rows = [[float(v) for v in open(path, encoding="utf-8").read().split()] for path in paths]
                batch = torch.tensor(rows, dtype=torch.float32)
                loss = torch.nn.functional.mse_loss(model(batch[:, 1:-1]), batch[:, -1:])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                record.write(json.dumps([step, epoch, [int(row[0]) for row in rows]]) + "\n")
                record.flush()
                if faulty and fault == "kill" and step == KILL_AT:
                    os.kill(os.getpid(), signal.SIGKILL)
                if checkpointer.should_save(step):
                    if faulty and fault == "torn" and step == 40:
                        _die_half_way_through_a_write()
                    checkpointer.save(step, model=model, optimizer=optimizer, loader=loader)
    weights = {name: value.detach().clone() for name, value in model.module.state_dict().items()}
    result = {
        "start": start,
        "steps": step,
        "attempt": attempt,
        "skipped": [(path.name, why) for path, why in checkpointer.skipped],
        "weights": weights if rank == 0 else None,
    }
    model = None  # the model goes before its process group
    dist.destroy_process_group()
    return result


def _die_half_way_through_a_write() -> None:
    """From now on, this rank's next checkpoint file is cut in half and the rank SIGKILLed, mid-``dcp.save``."""
    import os
    import signal

    from databricks.air.data import checksums

    def write_half_then_die(stream: Any, data: Any) -> int:
        view = memoryview(data).cast("B")
        stream._raw.write(view[: len(view) // 2])
        stream._raw.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return 0

    checksums.ChecksummingStream.write = write_half_then_die  # type: ignore[method-assign]


def _make_volume(folder: Path) -> Path:
    """``FILES`` small text files, each ``id x1 .. x4 y`` (the numbers exact in float32)."""
    folder.mkdir(parents=True)
    generator = random.Random(0)
    for index in range(FILES):
        numbers = [index] + [generator.randint(-64, 64) / 16 for _ in range(FEATURES + 1)]
        (folder / f"sample_{index:03d}.txt").write_text(" ".join(str(n) for n in numbers) + "\n")
    return folder


def _function(**settings: Any) -> Any:
    return distributed(accelerator_type="CPU", num_accelerators=2, timeout=240, **settings)(_train)


def _run(folder: Path, fault: Optional[str], **settings: Any) -> Tuple[List[Dict[str, Any]], Path, Any]:
    """Train in ``folder`` (data, checkpoints, records); returns the ranks' values, the records folder, the
    decorated function."""
    records = folder / "records"
    records.mkdir(parents=True)
    function = _function(**settings)
    values = function.distributed(str(folder.parent / "volume"), str(folder / "checkpoints"), str(records), fault)
    return values, records, function


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """The run without a fault: its final weights and its records."""
    root = tmp_path_factory.mktemp("resume")
    _make_volume(root / "volume")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABRICKS_AIR_MLFLOW", "0")
        patch.setenv("DATABRICKS_AIR_LOG_DIR", str(root / "logs"))
        values, records, _ = _run(root / "plain", None)
    assert [value["start"] for value in values] == [0, 0] and [v["steps"] for v in values] == [60, 60]
    return {"root": root, "weights": values[0]["weights"], "records": _read(records)}


def _read(records: Path) -> Dict[Tuple[int, int], List[Tuple[int, int, List[int]]]]:
    """``(rank, attempt) -> [(step, epoch, ids), ...]`` from the records folder."""
    found: Dict[Tuple[int, int], List[Tuple[int, int, List[int]]]] = {}
    for path in sorted(records.glob("rank*_attempt*.jsonl")):
        rank, attempt = (int(part) for part in path.stem[len("rank") :].split("_attempt"))
        found[(rank, attempt)] = [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore
    return found


def _committed(records: Dict[Tuple[int, int], List[Tuple[int, int, List[int]]]]) -> Dict[Tuple[int, int], Any]:
    """``(rank, step) -> (epoch, ids)``, each step's record from the last attempt that trained it: what the final
    weights were computed from."""
    committed: Dict[Tuple[int, int], Any] = {}
    for (rank, _attempt), rows in sorted(records.items(), key=lambda item: item[0][1]):
        for step, epoch, ids in rows:
            committed[(rank, step)] = (epoch, ids)
    return committed


def _assert_every_file_once_per_epoch(committed: Dict[Tuple[int, int], Any]) -> None:
    for rank in (0, 1):
        assert sorted(step for r, step in committed if r == rank) == list(range(1, EPOCHS * FILES // 2 + 1))
    for epoch in range(EPOCHS):
        seen = Counter(i for (_rank, _step), (e, ids) in committed.items() if e == epoch for i in ids)
        assert sorted(seen) == list(range(FILES)) and set(seen.values()) == {1}, (epoch, seen)


def _same_weights(got: Dict[str, torch.Tensor], want: Dict[str, torch.Tensor]) -> bool:
    return got.keys() == want.keys() and all(torch.equal(got[name], want[name]) for name in want)


def _no_process_left() -> bool:
    return wait_until(lambda: not [p for p in server_descendants() if p.status() != psutil.STATUS_ZOMBIE], 10)


def test_the_uninterrupted_run_reads_every_file_once_per_epoch(uninterrupted: Dict[str, Any]) -> None:
    records = uninterrupted["records"]
    assert sorted(records) == [(0, 0), (1, 0)]
    _assert_every_file_once_per_epoch(_committed(records))


@pytest.mark.slow
def test_a_rank_killed_at_step_50_resumes_from_step_40_and_ends_bit_for_bit_as_without_the_fault(
    uninterrupted: Dict[str, Any],
    store: str,
    capfd: pytest.CaptureFixture,
) -> None:
    import mlflow

    root = uninterrupted["root"]
    values, records_folder, function = _run(root / "killed", "kill", max_restarts=1)

    # The call returned, from the second attempt, which restored the checkpoint of step 40 and ran to the end.
    assert [(v["attempt"], v["start"], v["steps"]) for v in values] == [(1, 40, 60), (1, 40, 60)]
    assert _same_weights(values[0]["weights"], uninterrupted["weights"])
    err = capfd.readouterr().err
    assert (
        "databricks.air: rank 1 was killed by SIGKILL (the kernel's OOM killer?); restart 1 of 1 from step 40 "
        "(attempt 0's logs: " in err
    )

    records = _read(records_folder)
    assert sorted(records) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [row[0] for row in records[(1, 0)]] == list(range(1, KILL_AT + 1))
    for rank in (0, 1):
        resumed = [row[0] for row in records[(rank, 1)]]
        assert resumed[0] == 41 and resumed[-1] == 60
        lost = [row for row in records[(rank, 0)] if row[0] > 40]
        assert len(lost) <= 20  # steps recomputed: those after the last checkpoint, at most `every`
        # The steps run again read the same files as the first time: the loader's position was restored.
        assert lost == records[(rank, 1)][: len(lost)]
    committed = _committed(records)
    _assert_every_file_once_per_epoch(committed)
    plain = _committed(uninterrupted["records"])
    assert committed == plain  # the same files at the same steps as the uninterrupted run

    run = only_run(mlflow.MlflowClient(store))  # one run for the call, both attempts in it
    assert run.info.status == "FINISHED" and run.data.tags["databricks.air.restarts"] == "1"
    assert Path(function.last_log_dir, "attempt_0", "rank_1.txt").exists()
    assert _no_process_left()


@pytest.mark.slow
def test_a_checkpoint_torn_by_a_rank_killed_during_its_save_is_never_restored(uninterrupted: Dict[str, Any]) -> None:
    root = uninterrupted["root"]
    values, records_folder, _ = _run(root / "torn", "torn", max_restarts=1)

    # Attempt 0 died writing step 40: attempt 1 passed over that folder and resumed from step 20.
    assert [(v["attempt"], v["start"], v["steps"]) for v in values] == [(1, 20, 60), (1, 20, 60)]
    assert values[0]["skipped"] == [("step_40", "unfinished: no .metadata (its save did not finish)")]
    assert _same_weights(values[0]["weights"], uninterrupted["weights"])

    records = _read(records_folder)
    for rank in (0, 1):
        assert [row[0] for row in records[(rank, 0)]][-1] == 40
        assert [row[0] for row in records[(rank, 1)]][0] == 21  # 20 steps recomputed: 21 to 40
    committed = _committed(records)
    _assert_every_file_once_per_epoch(committed)
    assert committed == _committed(uninterrupted["records"])
    assert _no_process_left()
