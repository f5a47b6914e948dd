"""The data module's errors arrive whole where users meet them: through DCP's gathers and DataLoader workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch

from databricks.air import distributed
from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.errors import CorruptCheckpointError, DataFileVanishedError
from databricks.air.exceptions import DistributedExecutionError

from .conftest import corrupt_largest_shard


def _save_sharded(checkpoint: str) -> None:
    """Rank body: a DTensor sharded over both ranks, saved with UCVolumeWriter."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from databricks.air.data import UCVolumeWriter

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    weights = distribute_tensor(torch.arange(4096.0).reshape(64, 64), mesh, [Shard(0)])
    dcp.save({"w": weights}, storage_writer=UCVolumeWriter(checkpoint))
    dist.destroy_process_group()


def _load_sharded(checkpoint: str, catch: bool) -> Dict[str, Any]:
    """Rank body: load the sharded checkpoint; describe what ``dcp.load`` raised (or let it propagate)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from databricks.air.data import UCVolumeReader

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    weights = distribute_tensor(torch.zeros(64, 64), mesh, [Shard(0)])
    try:
        dcp.load({"w": weights}, storage_reader=UCVolumeReader(checkpoint))
    except CheckpointException as error:
        if not catch:
            raise
        return {
            "raised": type(error).__name__,
            "failures": {
                rank: (type(failure).__name__, getattr(failure, "path", None), str(failure))
                for rank, (failure, _stack) in error.failures.items()
            },
        }
    finally:
        dist.destroy_process_group()
    return {"raised": None, "failures": {}}


@pytest.mark.slow
def test_a_corrupted_shard_is_named_on_every_rank_and_in_the_caller(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    cpu2 = distributed(accelerator_type="CPU", num_accelerators=2, timeout=300)
    cpu2(_save_sharded).distributed(str(checkpoint))
    corrupted = corrupt_largest_shard(checkpoint)

    # In the ranks: DCP gathers each rank's exception from every rank by pickling it.
    results: List[Dict[str, Any]] = cpu2(_load_sharded).distributed(str(checkpoint), catch=True)
    for result in results:
        assert result["raised"] == "CheckpointException"
        assert result["failures"], result
        for name, path, text in result["failures"].values():
            assert name == "CorruptCheckpointError"
            assert path == str(corrupted) and str(corrupted) in text

    # In the caller: the rank's CheckpointException comes back with the CorruptCheckpointError inside.
    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(_load_sharded).distributed(str(checkpoint), catch=False)
    checkpoint_error = caught.value.failures[caught.value.rank]
    inner = [failure for failure, _stack in checkpoint_error.failures.values()]
    assert inner and all(isinstance(failure, CorruptCheckpointError) for failure in inner)
    assert all(failure.path == str(corrupted) and failure.offset is not None for failure in inner)
    assert str(corrupted) in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("loader_class", [DataLoader, torch.utils.data.DataLoader], ids=["ours", "torch"])
def test_a_file_deleted_during_the_epoch_is_named_by_a_worker_error(
    loader_class: type, tmp_path: Path, files: Any
) -> None:
    folder = files(40)
    dataset = UCVolumeDataset(str(folder), cache=True)  # the cache copies each file, so it finds the gap
    batches = iter(loader_class(dataset, batch_size=1, num_workers=2))
    next(batches)
    victim = folder / "f0039.bin"  # the last file: no worker has prefetched it yet
    os.remove(victim)
    with pytest.raises(DataFileVanishedError) as caught:
        for _ in batches:
            pass
    assert isinstance(caught.value, FileNotFoundError)  # not torch's RuntimeError fallback
    assert str(victim) in str(caught.value)
    assert "DataLoader worker process" in str(caught.value)
