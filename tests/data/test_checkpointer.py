"""Checkpointer: round trips in one process and on two gloo ranks, the data position per rank, keep, unfinished and
damaged checkpoints passed over, a world-size change, ``should_save`` and ``AIR_CHECKPOINT_DIR``."""

from __future__ import annotations

import logging
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import pytest
import torch

from databricks.air import distributed
from databricks.air.data import Checkpointer, DataLoader, UCVolumeDataset
from databricks.air.data.errors import CorruptCheckpointError, LoaderPositionError, StateMismatchError
from databricks.air.exceptions import DistributedExecutionError

from .conftest import corrupt_largest_shard, make_files


def _parts(seed: int = 0) -> Tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    loss = model(torch.randn(3, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()


def _same_tensors(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_one_process_round_trip_of_model_optimizer_scheduler_loader_and_extras(tmp_path: Path) -> None:
    make_files(tmp_path / "volume", 10)
    model, optimizer, scheduler = _parts()
    loader = DataLoader(UCVolumeDataset(tmp_path / "volume", shuffle=True, seed=1), batch_size=2, num_workers=0)
    batches = iter(loader)
    seen = [name for _ in range(3) for name in next(batches)]
    for _ in range(3):
        _train_step(model, optimizer, scheduler)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    folder = checkpointer.save(
        3,
        model=model,
        optimizer=optimizer,
        loader=loader,
        scheduler=scheduler,
        epoch=0,
        best={"loss": 0.5},
        ema=torch.arange(3.0),
    )
    assert folder == tmp_path / "ckpt" / "step_3"
    assert {".metadata", ".checksums.json"} <= set(os.listdir(folder))

    fresh_model, fresh_optimizer, fresh_scheduler = _parts(seed=1)
    fresh_loader = DataLoader(UCVolumeDataset(tmp_path / "volume", shuffle=True, seed=1), batch_size=2, num_workers=0)
    again = Checkpointer(tmp_path / "ckpt")
    assert (
        again.restore(model=fresh_model, optimizer=fresh_optimizer, loader=fresh_loader, scheduler=fresh_scheduler) == 3
    )
    assert _same_tensors(fresh_model.state_dict(), model.state_dict())
    for key, value in optimizer.state_dict()["state"][0].items():
        assert torch.equal(fresh_optimizer.state_dict()["state"][0][key], value), key
    assert fresh_scheduler.state_dict() == scheduler.state_dict()
    assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == 0.005
    assert again.extra.keys() == {"epoch", "best", "ema"}
    assert again.extra["best"] == {"loss": 0.5} and torch.equal(again.extra["ema"], torch.arange(3.0))
    assert again.restored == folder and again.skipped == []
    # The loader goes on with the first file the first loader had not handed out.
    rest = [name for batch in fresh_loader for name in batch]
    assert sorted(os.path.basename(name) for name in seen + rest) == [f"f{i:04d}.bin" for i in range(10)]


def test_without_any_checkpoint_restore_returns_none(tmp_path: Path) -> None:
    model, optimizer, _ = _parts()
    assert Checkpointer(tmp_path / "nothing-yet").restore(model=model, optimizer=optimizer) is None
    (tmp_path / "empty").mkdir()
    assert Checkpointer(tmp_path / "empty").restore(model=model) is None


def test_keep_leaves_the_newest_complete_checkpoints(tmp_path: Path) -> None:
    model, optimizer, scheduler = _parts()
    checkpointer = Checkpointer(tmp_path, keep=2)
    for step in range(1, 6):
        checkpointer.save(step, model=model, optimizer=optimizer)
    checkpointer.wait_for_removal()  # old checkpoints are deleted on a thread
    assert sorted(os.listdir(tmp_path)) == ["step_4", "step_5"]

    everything = Checkpointer(tmp_path / "all", keep=None)
    for step in (10, 20, 30):
        everything.save(step, model=model)
    everything.wait_for_removal()
    assert sorted(os.listdir(tmp_path / "all")) == ["step_10", "step_20", "step_30"]


def test_keep_counts_complete_checkpoints_and_leaves_later_steps_for_their_own_save(tmp_path: Path) -> None:
    model, _, _ = _parts()
    checkpointer = Checkpointer(tmp_path, keep=2)
    for step in (1, 2, 3):
        checkpointer.save(step, model=model)
    os.remove(tmp_path / "step_3" / ".metadata")  # step 3's save "did not finish"
    checkpointer.save(4, model=model)  # (the folder of an unfinished save before 4 goes; complete 2 stays)
    checkpointer.wait_for_removal()
    assert sorted(os.listdir(tmp_path)) == ["step_2", "step_4"]
    # Back to step 2 (as if step 4 had failed its checksums), then on to 3: step 4 stays until step 4 is saved.
    checkpointer.save(3, model=model)
    checkpointer.wait_for_removal()
    assert sorted(os.listdir(tmp_path)) == ["step_2", "step_3", "step_4"]


def test_an_unfinished_save_is_never_restored_the_previous_checkpoint_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, optimizer, scheduler = _parts()
    checkpointer = Checkpointer(tmp_path, keep=3)
    checkpointer.save(1, model=model, optimizer=optimizer, scheduler=scheduler)
    saved = {key: value.clone() for key, value in model.state_dict().items()}
    _train_step(model, optimizer, scheduler)
    checkpointer.save(2, model=model, optimizer=optimizer, scheduler=scheduler)
    # Step 2 as a killed save leaves it: its data files there (one cut short), no commit marker.
    os.remove(tmp_path / "step_2" / ".metadata")
    os.remove(tmp_path / "step_2" / ".checksums.json")
    shard = next((tmp_path / "step_2").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

    fresh, fresh_optimizer, fresh_scheduler = _parts(seed=5)
    with caplog.at_level(logging.WARNING, logger="databricks.air.data"):
        step = checkpointer.restore(model=fresh, optimizer=fresh_optimizer, scheduler=fresh_scheduler)
    assert step == 1 and _same_tensors(fresh.state_dict(), saved)
    assert checkpointer.skipped == [(tmp_path / "step_2", "unfinished: no .metadata (its save did not finish)")]
    assert f"skipped {tmp_path / 'step_2'}: unfinished" in caplog.text


def test_a_checkpoint_with_a_corrupted_shard_is_passed_over_naming_the_file(tmp_path: Path) -> None:
    model, optimizer, scheduler = _parts()
    checkpointer = Checkpointer(tmp_path, keep=3)
    checkpointer.save(1, model=model, optimizer=optimizer)
    saved = {key: value.clone() for key, value in model.state_dict().items()}
    _train_step(model, optimizer, scheduler)
    checkpointer.save(2, model=model, optimizer=optimizer)
    damaged = corrupt_largest_shard(tmp_path / "step_2")

    fresh, fresh_optimizer, _ = _parts(seed=5)
    assert checkpointer.restore(model=fresh, optimizer=fresh_optimizer) == 1
    assert _same_tensors(fresh.state_dict(), saved)
    ((folder, reason),) = checkpointer.skipped
    assert folder == tmp_path / "step_2" and f"checkpoint file {damaged} is corrupted" in reason

    # When no complete checkpoint restores, that is an error, not a fresh start.
    corrupt_largest_shard(tmp_path / "step_1")
    with pytest.raises(
        CorruptCheckpointError,
        match=f"no checkpoint under {tmp_path} could be restored: "
        "step_2: checkpoint file .* is corrupted.*; step_1: checkpoint file .* is corrupted",
    ):
        checkpointer.restore(model=fresh, optimizer=fresh_optimizer)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_what_the_checkpoint_lacks_or_cannot_restore_in_place_is_refused(tmp_path: Path) -> None:
    model, optimizer, scheduler = _parts()
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(7, model=model, epoch=2)
    with pytest.raises(
        StateMismatchError,
        match=r"step_7 has no optimizer, scheduler: it was saved without it "
        r"\(it holds model\)",
    ):
        checkpointer.restore(model=model, optimizer=optimizer, scheduler=scheduler)
    with pytest.raises(TypeError, match=r"restore\(epoch=...\).*come back in checkpointer.extra\['epoch'\]"):
        checkpointer.restore(model=model, epoch=0)
    with pytest.raises(ValueError, match="on_world_size_change must be one of"):
        checkpointer.restore(model=model, on_world_size_change="ignore")
    with pytest.raises(ValueError, match="pass model= too"):
        checkpointer.save(8, optimizer=optimizer)
    with pytest.raises(TypeError, match="an extra cannot be pickled"):
        checkpointer.save(8, model=model, callback=lambda: None)
    assert checkpointer.restore() == 7 and checkpointer.extra == {"epoch": 2}

    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.ones(2)}, checkpoint_id=tmp_path / "step_9", no_dist=True)  # torch's own writer
    with pytest.raises(StateMismatchError, match="step_9 holds no Checkpointer record"):
        checkpointer.restore(model=model)


def test_the_folder_comes_from_air_checkpoint_dir_or_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIR_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    assert Checkpointer().path == tmp_path / "from-env"
    assert Checkpointer(tmp_path / "given").path == tmp_path / "given"
    monkeypatch.delenv("AIR_CHECKPOINT_DIR")
    with pytest.raises(ValueError, match="Pass one .* or set the AIR_CHECKPOINT_DIR environment variable"):
        Checkpointer()
    with pytest.raises(ValueError, match="keep must be an int >= 1 or None, not 0"):
        Checkpointer(tmp_path, keep=0)


def test_should_save_every_n_steps(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path, every=3)
    assert [step for step in range(10) if checkpointer.should_save(step)] == [3, 6, 9]
    with pytest.raises(ValueError, match="needs an interval"):
        Checkpointer(tmp_path).should_save(3)


# -- two gloo ranks ------------------------------------------------------------------------------------------------


def _train(folder: str, root: str, epochs: int, stop_after: Optional[int]) -> Dict[str, Any]:
    """Rank body: DDP over the folder, a checkpoint every step (the newest two kept); resumes from the newest."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from databricks.air.data import Checkpointer, DataLoader, UCVolumeDataset

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True, seed=3), batch_size=2, num_workers=dist.get_rank())
    checkpointer = Checkpointer(root, keep=2, every=1)
    step = checkpointer.restore(model=model, optimizer=optimizer, loader=loader, scheduler=scheduler) or 0

    def snapshot() -> Dict[str, Any]:
        return {
            "model": {k: v.tolist() for k, v in model.module.state_dict().items()},  # noqa: F821 - before the del
            "exp_avg": [optimizer.state[p]["exp_avg"].tolist() for p in model.parameters() if p in optimizer.state],  # noqa: F821
            "lr": optimizer.param_groups[0]["lr"],
            "scheduler": scheduler.state_dict()["last_epoch"],
        }

    result = {"started": step, "restored": snapshot(), "seen": [], "saved": None}
    for epoch in range(loader.epoch, epochs):
        loader.set_epoch(epoch)
        for paths in loader:
            x = torch.stack([torch.full((4,), float(os.path.basename(p)[1:5])) for p in paths])
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            result["seen"] += [[epoch, os.path.basename(p)] for p in paths]
            if checkpointer.should_save(step):
                checkpointer.save(
                    step, model=model, optimizer=optimizer, loader=loader, scheduler=scheduler, epoch=epoch
                )
                result["saved"] = snapshot()
            if step == stop_after:
                break
        if step == stop_after:
            break
    result["steps"] = step
    del model  # DDP before its process group
    dist.destroy_process_group()
    return result


@pytest.mark.slow
def test_two_ranks_resume_mid_epoch_every_file_once_and_the_state_as_saved(tmp_path: Path) -> None:
    make_files(tmp_path / "volume", 12)  # 6 files a rank, 3 batches of 2: 3 steps an epoch
    root = tmp_path / "ckpt"
    cpu2 = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)(_train)
    first = cpu2.distributed(str(tmp_path / "volume"), str(root), epochs=2, stop_after=4)
    assert [r["steps"] for r in first] == [4, 4]
    assert sorted(os.listdir(root)) == ["step_3", "step_4"]  # keep=2
    assert first[0]["saved"] == first[1]["saved"]

    # On one rank (no process group): the model and optimizer come back resharded; the loader position refuses.
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = DataLoader(UCVolumeDataset(tmp_path / "volume", shuffle=True, seed=3), batch_size=2, num_workers=0)
    checkpointer = Checkpointer(root)
    with pytest.raises(LoaderPositionError) as caught:
        checkpointer.restore(model=model, optimizer=optimizer, loader=loader, scheduler=scheduler)
    error = caught.value
    assert (error.step, error.epoch, error.saved_world_size, error.world_size) == (4, 1, 2, 1)
    assert str(error).startswith(
        f"restored model, optimizer, scheduler, the plain extras from {root / 'step_4'} (step 4) but not the loader "
        "position (epoch 1): it was saved by 2 rank(s) and this run has 1."
    )
    assert "on_world_size_change='restart_epoch'" in str(error)
    assert {k: v.tolist() for k, v in model.state_dict().items()} == first[0]["saved"]["model"]
    assert [optimizer.state[p]["exp_avg"].tolist() for p in model.parameters()] == first[0]["saved"]["exp_avg"]
    assert scheduler.state_dict()["last_epoch"] == 4 and checkpointer.extra == {"epoch": 1}
    assert loader.state_dict()["delivered"] == 0 and loader.epoch == 0  # untouched
    assert checkpointer.restore(model=model, loader=loader, on_world_size_change="restart_epoch") == 4
    assert (loader.epoch, loader.state_dict()["delivered"]) == (1, 0)

    # Back on two ranks: each rank goes on at its own next file, with the model and optimizer as saved.
    rest = cpu2.distributed(str(tmp_path / "volume"), str(root), epochs=2, stop_after=None)
    assert [r["started"] for r in rest] == [4, 4] and [r["steps"] for r in rest] == [6, 6]
    assert rest[0]["restored"] == rest[1]["restored"] == first[0]["saved"]
    assert sorted(os.listdir(root)) == ["step_5", "step_6"]
    for epoch in (0, 1):
        names = Counter(name for run in (first, rest) for r in run for e, name in r["seen"] if e == epoch)
        assert sorted(names) == [f"f{i:04d}.bin" for i in range(12)] and set(names.values()) == {1}, epoch


def _save_until_killed(root: str, folder: str, killed_at: int) -> None:
    """Rank body: saves steps 1, 2, 3; rank 1 is SIGKILLed in the middle of writing its file of ``killed_at``."""
    import signal

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from databricks.air.data import Checkpointer, DataLoader, UCVolumeDataset
    from databricks.air.data import checksums

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(UCVolumeDataset(folder), batch_size=1, num_workers=0)  # a position on each rank to write
    checkpointer = Checkpointer(root, keep=3)
    for step in (1, 2, 3):
        if step == killed_at and dist.get_rank() == 1:

            def write_half_then_die(stream: Any, data: Any) -> int:
                view = memoryview(data).cast("B")
                stream._raw.write(view[: len(view) // 2])
                stream._raw.flush()
                os.kill(os.getpid(), signal.SIGKILL)
                return 0

            checksums.ChecksummingStream.write = write_half_then_die  # type: ignore[method-assign]
        model(torch.randn(2, 64)).sum().backward()
        optimizer.step()
        checkpointer.save(step, model=model, optimizer=optimizer, loader=loader)


def _restore(root: str, folder: str) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from databricks.air.data import Checkpointer, DataLoader, UCVolumeDataset

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(UCVolumeDataset(folder), batch_size=1, num_workers=0)
    checkpointer = Checkpointer(root)
    step = checkpointer.restore(model=model, optimizer=optimizer, loader=loader)
    del model
    dist.destroy_process_group()
    return {"step": step, "skipped": [(str(path), reason) for path, reason in checkpointer.skipped]}


@pytest.mark.slow
def test_a_rank_killed_during_a_save_and_a_corrupted_shard_fall_back_to_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    make_files(tmp_path / "volume", 4)
    root = tmp_path / "ckpt"
    cpu2 = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)
    with pytest.raises(DistributedExecutionError):
        cpu2(_save_until_killed).distributed(str(root), str(tmp_path / "volume"), killed_at=3)
    assert sorted(os.listdir(root)) == ["step_1", "step_2", "step_3"]
    assert not (root / "step_3" / ".metadata").exists() and any((root / "step_3").glob("__1_*.distcp"))
    damaged = corrupt_largest_shard(root / "step_2")

    results = cpu2(_restore).distributed(str(root), str(tmp_path / "volume"))
    for result in results:
        assert result["step"] == 1
        (unfinished, why_unfinished), (corrupt, why_corrupt) = result["skipped"]
        assert (unfinished, why_unfinished) == (
            str(root / "step_3"),
            "unfinished: no .metadata (its save did not finish)",
        )
        assert corrupt == str(root / "step_2") and f"checkpoint file {damaged} is corrupted" in why_corrupt
    shutil.rmtree(root)


def _fsdp2_round_trip(root: str) -> Dict[str, Any]:
    """Rank body: an FSDP2 (fully_shard) model and its Adam state saved sharded, restored into a fresh sharded copy."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import fully_shard

    from databricks.air.data import Checkpointer

    def sharded() -> torch.nn.Module:
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
        for layer in model:
            fully_shard(layer)
        return fully_shard(model)

    def full(model: torch.nn.Module) -> Dict[str, Any]:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return {key: value.tolist() for key, value in get_model_state_dict(model, options=options).items()}

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = sharded()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    checkpointer = Checkpointer(root)
    checkpointer.save(5, model=model, optimizer=optimizer)
    local_files = sorted(os.listdir(checkpointer.folder(5)))
    fresh = sharded()
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.1)
    step = checkpointer.restore(model=fresh, optimizer=fresh_optimizer)
    result = {"step": step, "saved": full(model), "restored": full(fresh), "files": local_files}
    dist.destroy_process_group()
    return result


@pytest.mark.slow
def test_an_fsdp2_model_is_saved_sharded_and_restores_on_two_ranks_and_on_one(tmp_path: Path) -> None:
    cpu2 = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)(_fsdp2_round_trip)
    results = cpu2.distributed(str(tmp_path))
    for result in results:  # (the full state dict is gathered on rank 0 only)
        assert result["step"] == 5 and result["restored"] == result["saved"]
    assert results[0]["saved"].keys() == {"0.weight", "0.bias", "1.weight", "1.bias"}
    assert {"__0_0.distcp", "__1_0.distcp"} <= set(results[0]["files"])  # each rank wrote its shards
    # One process, plain modules: DCP puts the shards together.
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    assert Checkpointer(tmp_path).restore(model=model, optimizer=optimizer) == 5
    assert {key: value.tolist() for key, value in model.state_dict().items()} == results[0]["saved"]
    assert optimizer.state[model[0].weight]["exp_avg"].shape == (16, 8)
