"""The warm-epoch fast paths give exactly what the general ones give: in-process batches, cache hits, copies."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

import pytest
import torch.profiler

from databricks.air.data import DataLoader, UCVolumeDataset, plan
from databricks.air.data.cache import FileCache
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.in_process import InProcessBatches

from .conftest import FlakyFileSystem, RemoteFileSystem, file_cache, volume_of


def _batches(loader: DataLoader, epochs: int = 2) -> List[Any]:
    return [batch for _ in range(epochs) for batch in loader]


def _names(batch: Any) -> Any:
    """File names instead of paths: two datasets cache into different folders."""
    return os.path.basename(batch) if isinstance(batch, str) else [os.path.basename(p) for p in batch]


@pytest.mark.parametrize(
    "batch_size, drop_last", [(None, False), (1, False), (3, False), (5, False), (1, True), (3, True), (5, True)]
)  # torch refuses drop_last unbatched
@pytest.mark.parametrize("cache", [False, True])
def test_in_process_batches_are_torch_s_batches(
    files: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, batch_size: Any, drop_last: bool, cache: bool
) -> None:
    folder = files(13)

    def run() -> List[Any]:
        dataset = UCVolumeDataset(folder, shuffle=True, cache=cache)
        loader = DataLoader(dataset, batch_size=batch_size, drop_last=drop_last, num_workers=0)
        return [_names(b) for b in _batches(loader)]

    ours = run()
    monkeypatch.setattr(InProcessBatches, "serves", staticmethod(lambda loader: False))
    assert ours == run()  # torch's single-process iterator over the same dataset
    assert len(ours) == 2 * (13 if batch_size is None else (13 // batch_size if drop_last else -(-13 // batch_size)))


def test_in_process_batches_use_the_collate_fn_and_know_their_length(files: Callable[..., Path]) -> None:
    loader = DataLoader(
        UCVolumeDataset(files(7)),
        batch_size=3,
        num_workers=0,
        collate_fn=lambda paths: tuple(sorted(os.path.basename(p) for p in paths)),
    )
    iterator = iter(loader)
    assert isinstance(iterator._inner, InProcessBatches)
    assert len(iterator) == len(loader) == 3
    assert list(iterator) == [
        ("f0000.bin", "f0001.bin", "f0002.bin"),
        ("f0003.bin", "f0004.bin", "f0005.bin"),
        ("f0006.bin",),
    ]
    assert next(iterator, None) is None  # an ended pass stays ended


def test_pin_memory_and_workers_keep_torch_s_iterators(files: Callable[..., Path]) -> None:
    folder = files(4)
    with pytest.warns(UserWarning, match="pin_memory"):
        pinned = DataLoader(UCVolumeDataset(folder), batch_size=2, num_workers=0, pin_memory=True)
        assert not isinstance(iter(pinned)._inner, InProcessBatches)
        assert [len(b) for b in pinned] == [2, 2]
    workers = DataLoader(UCVolumeDataset(folder), batch_size=2, num_workers=1)
    assert not isinstance(iter(workers)._inner, InProcessBatches)


def test_with_the_profiler_on_batches_are_recorded_under_torch_s_name(files: Callable[..., Path]) -> None:
    loader = DataLoader(UCVolumeDataset(files(4)), batch_size=2, num_workers=0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        assert [len(b) for b in loader] == [2, 2]
    names = [event.name for event in profile.events()]
    assert names.count("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") == 3  # 2 batches + the end


def test_shuffled_epochs_each_get_their_own_share(files: Callable[..., Path]) -> None:
    folder = files(11)
    dataset = UCVolumeDataset(folder, shuffle=True, seed=3, rank=1, world_size=2)
    loader = DataLoader(dataset, batch_size=2, num_workers=0)
    for epoch in range(3):
        got = [os.path.basename(p) for batch in loader for p in batch]
        order = plan.epoch_order(11, dataset.listing.fingerprint, 3, epoch, True)
        assert got == [dataset.listing.files[i] for i in plan.rank_share(order, 2, 1, "pad")]


@pytest.mark.parametrize("size", [0, 1, 65_535, 8 * 1024 * 1024 + 3])
def test_a_copy_is_byte_for_byte_the_source(tmp_path: Path, size: int) -> None:
    source, destination = tmp_path / "source.bin", tmp_path / "copy.bin"
    source.write_bytes(os.urandom(size))
    VolumeFileSystem().copy(str(source), str(destination))
    assert destination.read_bytes() == source.read_bytes()


def test_a_cache_hit_is_a_fresh_copy_and_anything_else_is_a_miss(tmp_path: Path) -> None:
    root = volume_of(tmp_path, {"a.bin": b"first"})
    cache = file_cache(tmp_path)
    hit = cache.hit_checker(str(root), ("a.bin",))
    assert hit(0) is None  # not copied yet
    copy = cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    assert hit(0) == copy
    assert hit(0) == copy  # remembered as fresh
    (root / "a.bin").write_bytes(b"second")
    os.utime(root / "a.bin", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert hit(0) is None  # stale: the source changed
    assert Path(cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())).read_bytes() == b"second"
    assert hit(0) == copy
    (root / "a.bin").unlink()
    assert hit(0) is None  # the source is gone: fetch() says so, with its retries and its error


def test_a_cache_hit_asks_the_volume_s_own_stat(tmp_path: Path) -> None:
    root = volume_of(tmp_path, {"a.bin": b"data"})

    class Counting(VolumeFileSystem):
        stats = 0

        def stat(self, path: str) -> os.stat_result:
            Counting.stats += 1
            return super().stat(path)

    cache = file_cache(tmp_path, Counting())
    cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    before = Counting.stats
    assert cache.hit_checker(str(root), ("a.bin",))(0) is not None
    assert Counting.stats == before + 1


def test_on_error_skip_with_one_io_thread_keeps_the_count(files: Callable[..., Path]) -> None:
    folder = files(6)
    flaky = FlakyFileSystem({"f0002.bin": 100}, OSError(errno.EIO, "Input/output error"))
    dataset = UCVolumeDataset(folder, filesystem=flaky, on_error="skip", retries=1, io_threads=1)
    loader = DataLoader(dataset, batch_size=2, num_workers=0)
    names = [os.path.basename(p) for batch in loader for p in batch]
    assert len(names) == 6 and "f0002.bin" not in names
    assert names[1:3] == ["f0001.bin", "f0001.bin"]  # the file before fills the slot


def test_direct_iteration_with_one_io_thread_copies_each_file_once(files: Callable[..., Path], tmp_path: Path) -> None:
    log = str(tmp_path / "copies.log")
    dataset = UCVolumeDataset(files(5), filesystem=RemoteFileSystem(log), io_threads=1)
    first, second = list(dataset), list(dataset)
    assert first == second and all(os.path.exists(p) for p in first)
    assert sum(RemoteFileSystem(log).logged().values()) == 5


FETCH_IN_ANOTHER_PROCESS = """
import sys
from databricks.air.data.cache import FileCache
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.retry import RetryPolicy
directory, limit, min_free, source, relative = sys.argv[1:]
cache = FileCache(directory, limit_bytes=None if limit == "none" else int(limit), min_free_bytes=int(min_free),
                  filesystem=VolumeFileSystem(), retry=RetryPolicy(attempts=1, total_seconds=1.0))
cache.fetch(source, relative, lambda: set())
"""


def _fetch_in_another_process(cache: FileCache, source: Path, limit: Any, min_free: int = 0) -> None:
    subprocess.run(
        [
            sys.executable,
            "-c",
            FETCH_IN_ANOTHER_PROCESS,
            os.path.dirname(cache.files_dir),
            str(limit).lower(),
            str(min_free),
            str(source),
            source.name,
        ],
        check=True,
        timeout=120,
    )


def test_a_copy_found_fresh_is_not_looked_at_again_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = volume_of(tmp_path, {"a.bin": b"data"})
    cache = file_cache(tmp_path)
    copy = cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    looked: List[str] = []
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda path, *args, **kwargs: looked.append(path) or real_lstat(path))
    files = ("a.bin",)
    hit = cache.hit_checker(str(root), files)
    assert [hit(0), hit(0), hit(0)] == [copy] * 3
    assert cache.hit_checker(str(root), files)(0) == copy  # the next pass remembers too
    assert looked == [copy]
    with cache._locked() as fd:
        cache._bump_generation(fd)  # as after an eviction anywhere
    assert [hit(0), hit(0)] == [copy] * 2
    assert looked == [copy, copy]  # looked at once more, then remembered again


@pytest.mark.slow
@pytest.mark.parametrize("limit", [None, 1000])
def test_a_copy_evicted_by_another_process_is_no_longer_a_hit(tmp_path: Path, limit: Any) -> None:
    root = volume_of(tmp_path, {name: bytes(400) for name in ("a.bin", "b.bin", "c.bin")})
    cache = file_cache(tmp_path, limit_bytes=limit)
    hit = cache.hit_checker(str(root), ("a.bin", "b.bin", "c.bin"))
    first = cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    assert hit(0) == first and hit(0) == first  # found fresh, then remembered
    cache.fetch(str(root / "b.bin"), "b.bin", lambda: set())
    if limit is None:  # nothing is counted: only a disk running full evicts
        _fetch_in_another_process(cache, root / "c.bin", None, min_free=2**62)
    else:  # over 1000 bytes: evicts a.bin, the oldest
        _fetch_in_another_process(cache, root / "c.bin", limit)
    assert not os.path.exists(first)
    assert hit(0) is None
    assert hit(2) is not None


@pytest.mark.slow
@pytest.mark.parametrize("limit", [None, 1000])
def test_a_copy_replaced_by_another_process_is_checked_again(tmp_path: Path, limit: Any) -> None:
    source = volume_of(tmp_path, {"a.bin": b"first"}) / "a.bin"
    root = source.parent
    first_mtime = source.stat().st_mtime_ns
    cache = file_cache(tmp_path, limit_bytes=limit)
    hit = cache.hit_checker(str(root), ("a.bin",))
    copy = cache.fetch(str(source), "a.bin", lambda: set())
    assert hit(0) == copy
    source.write_bytes(b"other")
    os.utime(source, ns=(time.time_ns(), first_mtime + 10**9))
    _fetch_in_another_process(cache, source, limit)  # replaces the stale copy with "other"
    assert Path(copy).read_bytes() == b"other"
    source.write_bytes(b"first")
    os.utime(source, ns=(time.time_ns(), first_mtime))  # restored as it was: same size, same time
    assert hit(0) is None  # the copy now holds "other": what this process remembered no longer stands
    assert Path(cache.fetch(str(source), "a.bin", lambda: set())).read_bytes() == b"first"
