"""UCVolumeDataset and DataLoader together: what real workers yield, lengths, epochs, shuffles, defaults."""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path
from typing import Callable, List

import pytest
import torch

from databricks.air.data import Checkpointable, DataLoader, UCVolumeDataset
from databricks.air.data import plan
from databricks.air.data.loader import default_num_workers


def _names(batches: list) -> List[str]:
    flat = []
    for batch in batches:
        flat += [os.path.basename(p) for p in (batch if isinstance(batch, list) else [batch])]
    return flat


@pytest.mark.parametrize("workers, batch, persistent", [(0, 4, False), (2, 4, True), (3, 5, False), (2, None, True)])
def test_real_workers_yield_the_rank_share_in_order_with_equal_batches(
    files: Callable[..., Path], workers: int, batch: int, persistent: bool
) -> None:
    folder = files(23)
    everything = Counter()
    batch_counts = set()
    for rank in range(3):
        dataset = UCVolumeDataset(folder, rank=rank, world_size=3, shuffle=True, seed=5)
        kwargs = {"prefetch_factor": 2, "persistent_workers": persistent} if workers else {}
        loader = DataLoader(dataset, batch_size=batch, num_workers=workers, **kwargs)
        batches = list(loader)
        order = plan.epoch_order(23, dataset.listing.fingerprint, 5, 0, True)
        expected = [dataset.listing.files[i] for i in plan.rank_share(order, 3, rank, "pad")]
        assert _names(batches) == expected  # in order, whatever the number of workers
        assert len(batches) == len(loader)  # exact length, B4
        assert len(dataset) == 8
        batch_counts.add(len(batches))
        everything.update(_names(batches))
    assert len(batch_counts) == 1
    assert set(everything) == {f"f{i:04d}.bin" for i in range(23)}
    assert sum(everything.values()) == 24  # one padded repeat


def test_lengths_are_exact_and_equal_on_every_rank_with_drop_last(files: Callable[..., Path]) -> None:
    folder = files(22)
    for rank in range(2):
        loader = DataLoader(
            UCVolumeDataset(folder, rank=rank, world_size=2), batch_size=4, num_workers=3, drop_last=True
        )
        batches = list(loader)
        assert len(loader) == len(batches) == 2  # 11 files per rank: 2 full batches, the partial one dropped
        assert all(len(b) == 4 for b in batches)


def test_equalize_none_reproduces_the_reference_stride_with_workers(files: Callable[..., Path]) -> None:
    folder = files(10)
    dataset = UCVolumeDataset(folder, rank=1, world_size=2, equalize="none")
    got = _names(list(DataLoader(dataset, batch_size=None, num_workers=2)))
    assert got == [f"f{i:04d}.bin" for i in (1, 3, 5, 7, 9)]


def test_drop_reports_the_files_left_out(files: Callable[..., Path], caplog: pytest.LogCaptureFixture) -> None:
    folder = files(11)
    dataset = UCVolumeDataset(folder, rank=0, world_size=4, equalize="drop")
    with caplog.at_level(logging.WARNING, logger="databricks.air.data"):
        got = list(DataLoader(dataset, batch_size=None, num_workers=0))
    assert len(got) == 2
    assert [os.path.basename(p) for p in dataset.dropped_files(0)] == ["f0008.bin", "f0009.bin", "f0010.bin"]
    assert "leaves out 3 file(s)" in caplog.text and "f0010.bin" in caplog.text


def test_f4_fewer_batches_than_workers_warns_and_stays_equal(
    files: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    folder = files(3)
    counts = []
    with caplog.at_level(logging.WARNING, logger="databricks.air.data"):
        for rank in range(2):
            loader = DataLoader(
                UCVolumeDataset(folder, rank=rank, world_size=2), batch_size=1, num_workers=3, persistent_workers=False
            )
            counts.append(len(list(loader)))
    assert counts == [2, 2]
    assert "worker(s) 2 get no files" in caplog.text


def test_the_epoch_advances_by_itself_and_set_epoch_agrees(files: Callable[..., Path]) -> None:
    folder = files(30)
    automatic = UCVolumeDataset(folder, shuffle=True)
    explicit = UCVolumeDataset(folder, shuffle=True)
    loader_a = DataLoader(automatic, batch_size=None, num_workers=0)
    loader_b = DataLoader(explicit, batch_size=None, num_workers=2, persistent_workers=True)
    epochs = []
    for epoch in range(3):
        loader_b.set_epoch(epoch)
        a, b = list(loader_a), list(loader_b)
        assert _names(a) == _names(b)
        epochs.append(_names(a))
    assert epochs[0] != epochs[1] != epochs[2]
    assert automatic.epoch == 3
    loader_b.set_epoch(1)  # back to epoch 1: the same order again, also for persistent workers
    assert _names(list(loader_b)) == epochs[1]


def test_shuffle_is_the_same_after_a_restart_and_on_every_rank(files: Callable[..., Path]) -> None:
    folder = files(41)
    first = [
        list(UCVolumeDataset(folder, shuffle=True, seed=3, rank=r, world_size=2, equalize="none")) for r in range(2)
    ]
    again = [
        list(UCVolumeDataset(folder, shuffle=True, seed=3, rank=r, world_size=2, equalize="none")) for r in range(2)
    ]
    assert first == again
    assert sorted(first[0] + first[1]) == sorted(str(folder / f"f{i:04d}.bin") for i in range(41))


def test_iterating_the_dataset_directly_yields_local_paths_of_the_rank_share(files: Callable[..., Path]) -> None:
    folder = files(5)
    dataset = UCVolumeDataset(folder, rank=1, world_size=2)
    assert list(dataset) == [str(folder / n) for n in ("f0001.bin", "f0003.bin", "f0000.bin")]
    assert all(isinstance(p, str) for p in dataset)


@pytest.mark.slow
def test_spawned_workers_know_their_rank_and_share_the_cache(files: Callable[..., Path]) -> None:
    folder = files(8)
    dataset = UCVolumeDataset(folder, rank=1, world_size=2, cache=True)
    loader = DataLoader(dataset, batch_size=2, num_workers=1, multiprocessing_context="spawn", persistent_workers=True)
    first = list(loader)
    assert _names(first) == ["f0001.bin", "f0003.bin", "f0005.bin", "f0007.bin"]
    cache = Path(dataset._storage.workspace.path) / "files"
    assert all(p.startswith(str(cache)) for batch in first for p in batch)  # the main process's own cache
    assert _names(list(loader)) == _names(first)


def test_loader_defaults_are_the_reference_done_right(files: Callable[..., Path], monkeypatch) -> None:
    dataset = UCVolumeDataset(files(4))
    no_workers = DataLoader(dataset, num_workers=0)
    assert no_workers.prefetch_factor is None and no_workers.persistent_workers is False  # torch accepts it
    with_workers = DataLoader(dataset, num_workers=2)
    assert with_workers.prefetch_factor == 4 and with_workers.persistent_workers is True
    assert DataLoader(dataset, num_workers=2, persistent_workers=False).persistent_workers is False  # not overridden
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert default_num_workers() == max(1, min(48, cpus))
    assert DataLoader(dataset).num_workers == max(1, min(48, cpus))
    positional = DataLoader(dataset, 2, False, None, None, 0)  # torch's positional order still works
    assert positional.batch_size == 2 and positional.num_workers == 0 and positional.prefetch_factor is None


def test_in_order_false_is_refused_for_a_volume_dataset(files: Callable[..., Path]) -> None:
    with pytest.raises(ValueError, match="in_order=True"):
        DataLoader(UCVolumeDataset(files(4)), num_workers=2, in_order=False)


def test_batch_size_set_twice_must_agree(files: Callable[..., Path]) -> None:
    with pytest.raises(ValueError, match="leave the dataset's batch_size unset"):
        DataLoader(UCVolumeDataset(files(4), batch_size=3), batch_size=4, num_workers=0)


def test_a_plain_torch_dataloader_with_the_dataset_batch_size_also_equalizes(files: Callable[..., Path]) -> None:
    folder = files(13)
    counts = []
    for rank in range(2):
        dataset = UCVolumeDataset(folder, rank=rank, world_size=2, batch_size=3)
        counts.append(len(list(torch.utils.data.DataLoader(dataset, batch_size=3, num_workers=2))))
    assert counts == [3, 3]


def test_metrics_go_to_the_sink_with_the_reference_names(files: Callable[..., Path]) -> None:
    logged = []
    loader = DataLoader(
        UCVolumeDataset(files(6)),
        batch_size=2,
        num_workers=0,
        metrics=lambda metrics, step: logged.append((step, metrics)),
    )
    list(loader)
    assert logged and logged[-1][0] == 3
    keys = set(logged[-1][1])
    assert {
        "dataloader/fetch_seconds/rank_0",
        "dataloader/fetch_seconds_variance/rank_0",
        "dataloader/between_next_seconds/rank_0",
        "dataloader/between_next_seconds_variance/rank_0",
    } == keys
    failing = DataLoader(
        UCVolumeDataset(files(6, name="other")), batch_size=2, num_workers=0, metrics=lambda metrics, step: 1 / 0
    )
    assert len(list(failing)) == 3  # a failing sink never stops training


class _Counting(torch.utils.data.IterableDataset):
    """A checkpointable dataset of another kind: counts what it yielded, resumes from a count."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.skip = 0
        self.yielded = 0

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        mine = list(range(worker, self.n, workers))
        self.yielded = self.skip
        for value in mine[self.skip :]:
            self.yielded += 1
            yield value
        self.skip = 0

    def state_dict(self):
        return {"yielded": self.yielded}

    def load_state_dict(self, state):
        self.skip = state["yielded"]


@pytest.mark.parametrize("workers", [0, 2])
def test_any_checkpointable_dataset_resumes_with_exactly_the_undelivered_items(workers: int) -> None:
    dataset = _Counting(20)
    assert isinstance(dataset, Checkpointable)
    loader = DataLoader(dataset, batch_size=2, num_workers=workers)
    iterator = iter(loader)
    taken = [next(iterator).tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["version"] == 1 and state["num_workers"] == workers and state["world_size"] == 1
    rest = [b.tolist() for b in iterator]
    resumed = DataLoader(_Counting(20), batch_size=2, num_workers=workers)
    import json

    resumed.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON round trip
    assert resumed.state_dict() == json.loads(json.dumps(state))  # the loaded baseline until batches arrive
    resumed_rest = [b.tolist() for b in resumed]
    # Each worker resumes its own stream: exactly the remaining items (the interleaving of workers may differ).
    assert sorted(sum(resumed_rest, [])) == sorted(sum(rest, []))
    assert sorted(sum(taken + rest, [])) == list(range(20))
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(_Counting(20), batch_size=2, num_workers=workers + 1).load_state_dict(state)


def test_a_dataset_without_state_cannot_be_checkpointed() -> None:
    loader = DataLoader(list(range(5)), batch_size=2, num_workers=0)
    with pytest.raises(TypeError, match="is not checkpointable"):
        loader.state_dict()


def _names_and_sizes(paths: List[str]) -> tuple:
    return tuple(os.path.basename(p) for p in paths), sum(os.path.getsize(p) for p in paths)


def test_h1_the_state_counts_delivered_batches_with_a_custom_collate_and_prefetching(
    files: Callable[..., Path],
) -> None:
    folder = files(20)
    loader = DataLoader(
        UCVolumeDataset(folder), batch_size=3, num_workers=2, prefetch_factor=4, collate_fn=_names_and_sizes
    )
    iterator = iter(loader)
    first = next(iterator)
    assert first == (("f0000.bin", "f0001.bin", "f0002.bin"), 48)
    next(iterator)
    assert loader.state_dict()["delivered"] == 6  # received, although workers have prefetched more
