"""Two gloo ranks through ``.distributed()``: agreement checks, equal batches in DDP, sharded DCP checkpoints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
import torch

from databricks.air import distributed
from databricks.air.data import DataLoader, UCVolumeDataset, UCVolumeReader
from databricks.air.data.errors import StateMismatchError


def _train_and_checkpoint(folder: str, checkpoint: str) -> Dict[str, Any]:
    """Rank body: DDP over an odd number of files with different worker counts per rank, then a sharded save."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.nn.parallel import DistributedDataParallel

    from databricks.air.data import DataLoader, UCVolumeDataset, UCVolumeReader, UCVolumeWriter

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = UCVolumeDataset(folder, shuffle=True, seed=1)  # 7 files: ranks split them 4 + 4 (one padded)
    loader = DataLoader(dataset, batch_size=3, num_workers=rank * 2)  # 0 workers on rank 0, 2 on rank 1
    steps = 0
    seen: List[str] = []
    for paths in loader:  # a rank with one batch more than the other would block in all-reduce
        batch = torch.stack([torch.load(p) for p in paths])
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        seen += [os.path.basename(p) for p in paths]
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    sharded = distribute_tensor(full, mesh, [Shard(0)])
    dcp.save(
        {"w": sharded, f"loader_{rank}": loader, "bias": model.module.bias.detach()},
        storage_writer=UCVolumeWriter(checkpoint),
    )
    restored = distribute_tensor(torch.zeros(6, 4), mesh, [Shard(0)])
    fresh = DataLoader(UCVolumeDataset(folder, shuffle=True, seed=1), batch_size=3, num_workers=0)
    dcp.load({"w": restored, f"loader_{rank}": fresh}, storage_reader=UCVolumeReader(checkpoint))
    local = restored.to_local()
    del model  # DDP goes first: torch's gloo threads can deadlock if DDP outlives the process group
    dist.destroy_process_group()
    return {"steps": steps, "seen": seen, "local": local.tolist(), "loader": fresh.state_dict()}


def _disagree(good: str, other: str) -> Dict[str, str]:
    """Rank body: rank 1 lists another folder, then asks for another batch size; both must fail before a batch."""
    import torch.distributed as dist

    from databricks.air.data import DataLoader, UCVolumeDataset
    from databricks.air.data.errors import RankMismatchError

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    messages = {}
    try:
        next(iter(DataLoader(UCVolumeDataset(good if rank == 0 else other), batch_size=2, num_workers=0)))
        messages["listing"] = "no error"
    except RankMismatchError as error:
        messages["listing"] = str(error)
    try:
        next(iter(DataLoader(UCVolumeDataset(good), batch_size=2 + rank, num_workers=0)))
        messages["batch"] = "no error"
    except RankMismatchError as error:
        messages["batch"] = str(error)
    dist.destroy_process_group()
    return messages


def test_ddp_over_an_odd_file_count_finishes_and_sharded_checkpoints_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "volume"
    folder.mkdir()
    for index in range(7):
        torch.save(torch.full((4,), float(index)), folder / f"sample{index}.pt")
    checkpoint = tmp_path / "checkpoint"
    run = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)(_train_and_checkpoint)
    results = run.distributed(str(folder), str(checkpoint))
    assert [r["steps"] for r in results] == [2, 2]  # B5: equal batches although the files are odd
    everything = results[0]["seen"] + results[1]["seen"]
    assert sorted(set(everything)) == [f"sample{i}.pt" for i in range(7)] and len(everything) == 8
    assert results[0]["local"] == [[float(4 * r + c) for c in range(4)] for r in range(3)]
    assert results[1]["local"] == [[float(4 * r + c) for c in range(4)] for r in range(3, 6)]
    for rank, result in enumerate(results):  # D8: each rank got its own loader state back through DCP
        assert (result["loader"]["rank"], result["loader"]["epoch"], result["loader"]["delivered"]) == (rank, 1, 0)

    # I1: the 2-rank checkpoint loads in one process (resharded), verified against its checksums.
    import torch.distributed.checkpoint as dcp

    whole = {"w": torch.zeros(6, 4)}
    dcp.load(whole, storage_reader=UCVolumeReader(checkpoint), no_dist=True)
    assert torch.equal(whole["w"], torch.arange(24, dtype=torch.float32).reshape(6, 4))

    # D8: a loader state saved on 2 ranks does not load into a run of another world size.
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True, seed=1), batch_size=3, num_workers=0)
    saved = {"loader_1": loader.state_dict()}  # the structure to fill
    dcp.load(saved, storage_reader=UCVolumeReader(checkpoint), no_dist=True)
    assert saved["loader_1"]["world_size"] == 2 and saved["loader_1"]["rank"] == 1
    with pytest.raises(StateMismatchError, match="world_size=2 but this run has world_size=1"):
        loader.load_state_dict(saved["loader_1"])


def test_a3_a4_ranks_that_disagree_fail_before_any_batch(files: Callable[..., Path]) -> None:
    good = files(6, name="good")
    other = files(7, name="other")  # as if one more file were not visible yet on rank 0's node
    run = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)(_disagree)
    results = run.distributed(str(good), str(other))
    for messages in results:
        assert "listing: rank 0: {'count': 6" in messages["listing"] and "rank 1: {'count': 7" in messages["listing"]
        assert "may not be visible on every node yet" in messages["listing"]
        assert "batch_size: rank 0: 2, rank 1: 3" in messages["batch"]
