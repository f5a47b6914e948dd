"""The local cache: a hard byte cap, no eviction of files in flight, warm epochs, atomic fills, clean-up."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Callable, List

import pytest

from process_helpers import wait_until

from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.cache import FileCache
from databricks.air.data.workspace import Workspace, reclaim_abandoned

from .conftest import RemoteFileSystem, file_cache, volume_of

SIZE = 1024


def _cache_bytes(root: Path) -> int:
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            if folder.endswith("files") or "/files" in folder:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_size
                except FileNotFoundError:
                    pass
    return total


def _open_all(batch: List[str]) -> None:
    for path in batch:
        with open(path, "rb") as stream:
            data = stream.read()
        index = int(os.path.basename(path)[1:5])
        assert data == index.to_bytes(4, "little") * (SIZE // 4), path  # never a partial or foreign file


def test_e1_the_cache_stays_under_its_limit_plus_the_files_in_flight(
    files: Callable[..., Path], _private_cache_root: Path
) -> None:
    folder = files(60, size=SIZE)
    limit_files, workers, prefetch, batch, threads = 5, 2, 2, 2, 2
    dataset = UCVolumeDataset(
        folder, shuffle=True, filesystem=RemoteFileSystem(), cache_limit_bytes=limit_files * SIZE, io_threads=threads
    )
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers, prefetch_factor=prefetch)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _cache_bytes(_private_cache_root))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for epoch in range(3):
            for paths in loader:
                _open_all(paths)
    finally:
        stop.set()
        sampler.join()
    # In flight at most: the batch in the loop, the prefetched batches, each worker's read-ahead and its batch.
    in_flight = batch * (1 + workers * (prefetch + 1)) + workers * (2 * threads + batch)
    assert peak[0] <= (limit_files + in_flight) * SIZE
    assert peak[0] < 60 * SIZE / 2  # well below an uncapped cache of every file


def test_e1_a_limit_below_the_largest_file_is_refused_when_the_dataset_is_built(files: Callable[..., Path]) -> None:
    folder = files(3, size=SIZE)
    with pytest.raises(ValueError, match=r"cache_limit_bytes=100 is smaller than .*f000\d.bin \(1024 bytes\)"):
        UCVolumeDataset(folder, filesystem=RemoteFileSystem(), cache_limit_bytes=100)


def _train_with_tiny_cache(folder: Path) -> int:
    dataset = UCVolumeDataset(folder, shuffle=True, filesystem=RemoteFileSystem(), cache_limit_bytes=3 * SIZE)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, prefetch_factor=4)
    missing = 0
    for _ in range(3):
        for paths in loader:
            time.sleep(0.002)  # let the workers run ahead
            for path in paths:
                try:
                    _open_all([path])
                except FileNotFoundError:
                    missing += 1
    return missing


def test_e2_no_file_is_evicted_before_the_training_loop_has_used_it(files: Callable[..., Path]) -> None:
    assert _train_with_tiny_cache(files(40, size=SIZE)) == 0


def test_e2_the_check_above_fails_when_in_flight_files_are_not_pinned(
    files: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = FileCache._make_room
    monkeypatch.setattr(
        FileCache, "_make_room", lambda self, fd, need, pinned, keep: original(self, fd, need, lambda: set(), keep)
    )
    assert _train_with_tiny_cache(files(40, size=SIZE)) > 0


def test_e3_e6_a_warm_epoch_reads_nothing_from_the_source_and_the_source_is_untouched(
    files: Callable[..., Path], tmp_path: Path
) -> None:
    folder = files(30, size=SIZE)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    log = str(tmp_path / "copies.log")
    dataset = UCVolumeDataset(folder, shuffle=True, filesystem=RemoteFileSystem(log), cache_limit_bytes=40 * SIZE)
    loader = DataLoader(dataset, batch_size=4, num_workers=2)
    for paths in loader:
        _open_all(paths)
    assert sum(RemoteFileSystem(log).logged().values()) == 30
    for paths in loader:  # epoch 1, another order, every file from the cache
        _open_all(paths)
    assert sum(RemoteFileSystem(log).logged().values()) == 30
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # E6: never touched


def test_e6_eviction_never_deletes_the_source(files: Callable[..., Path]) -> None:
    folder = files(20, size=SIZE)
    before = sorted(os.listdir(folder))
    _train_with_tiny_cache(folder)
    assert sorted(os.listdir(folder)) == before


def test_e7_a_copy_whose_source_changed_is_fetched_again(files: Callable[..., Path], tmp_path: Path) -> None:
    folder = files(4, size=SIZE)
    log = str(tmp_path / "copies.log")
    dataset = UCVolumeDataset(folder, filesystem=RemoteFileSystem(log))
    first = list(dataset)
    changed = folder / "f0002.bin"
    changed.write_bytes(b"new content")
    os.utime(changed, ns=(time.time_ns(), time.time_ns() + 10**9))
    second = list(dataset)
    assert first == second  # the same cached paths
    assert Path(second[2]).read_bytes() == b"new content"
    assert RemoteFileSystem(log).logged()["f0002.bin"] == 2
    assert RemoteFileSystem(log).logged()["f0001.bin"] == 1


def test_e8_auto_reads_local_folders_in_place_and_copies_from_mounts(
    files: Callable[..., Path], _private_cache_root: Path
) -> None:
    folder = files(3)
    local = UCVolumeDataset(folder)
    assert not local.cache_enabled and list(local) == [str(folder / f"f000{i}.bin") for i in range(3)]
    assert not _private_cache_root.exists()  # nothing copied, no cache folder made
    remote = UCVolumeDataset(folder, filesystem=RemoteFileSystem())
    assert remote.cache_enabled and all(p.startswith(str(_private_cache_root)) for p in remote)
    never = UCVolumeDataset(folder, filesystem=RemoteFileSystem(), cache=False)
    assert list(never) == list(local)
    assert UCVolumeDataset(folder, cache=True).cache_enabled


def test_e4_a_failed_copy_leaves_nothing_at_the_final_path(files: Callable[..., Path]) -> None:
    folder = files(3, size=SIZE)

    class DiesHalfway(RemoteFileSystem):
        def copy(self, source: str, destination: str) -> None:
            with open(destination, "wb") as stream:
                stream.write(b"partial")
            raise PermissionError(13, "stopped", source)  # never retried: one attempt

    dataset = UCVolumeDataset(folder, filesystem=DiesHalfway())
    with pytest.raises(PermissionError):
        list(dataset)
    files_dir = Path(dataset._storage.workspace.path) / "files"
    # The error comes from the first failed copy; copies of other files already in flight on I/O threads fail and
    # clean up on their own threads, so their temporaries may outlive the raise by a moment.
    assert wait_until(lambda: list(files_dir.rglob("*")) == [], timeout=10), list(files_dir.rglob("*"))
    assert wait_until(lambda: dataset._storage.cache().usage_bytes() == 0, timeout=10)  # reservations given back


KILLED_MID_COPY = """
import os, sys, time
sys.path.insert(0, {tests!r})
from data.conftest import RemoteFileSystem
from databricks.air.data import UCVolumeDataset

class Slow(RemoteFileSystem):
    def copy(self, source, destination):
        with open(destination, "wb") as stream:
            stream.write(b"half")
            stream.flush()
            print("COPYING", flush=True)
            time.sleep(60)

dataset = UCVolumeDataset({folder!r}, filesystem=Slow())
print("WORKSPACE", dataset._storage.ensure_workspace().path, flush=True)
list(dataset)
"""


def test_e4_e5_a_killed_run_leaves_no_final_file_and_the_next_run_reclaims_its_folder(
    files: Callable[..., Path], _private_cache_root: Path
) -> None:
    folder = files(2, size=SIZE)
    script = KILLED_MID_COPY.format(tests=str(Path(__file__).parent.parent), folder=str(folder))
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    workspace = None
    for line in child.stdout:
        if line.startswith("WORKSPACE"):
            workspace = Path(line.split()[1])
        if line.startswith("COPYING"):
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()
    assert workspace is not None and workspace.exists()
    finals = [p for p in (workspace / "files").rglob("*") if not p.name.startswith(".")]
    assert finals == []  # the copy in progress was an unnamed file (or, without O_TMPFILE, a hidden one)
    assert reclaim_abandoned(str(_private_cache_root)) == 1
    assert not workspace.exists()


def test_a_workspace_being_made_is_never_taken_for_an_abandoned_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's sweep (its own ``Workspace.create``) at the worst moment: after this one's lock file exists,
    before it is locked. It used to take that lock itself and remove the new folder (a rank then failed with
    ``FileNotFoundError`` on its ``control`` file)."""
    real_flock = fcntl.flock
    swept: List[int] = []

    def flock_after_a_sweep(descriptor: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and not swept:  # the new owner's own lock, about to be taken
            swept.append(reclaim_abandoned(str(tmp_path)))
        real_flock(descriptor, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_sweep)
    workspace = Workspace.create(str(tmp_path))
    assert swept == [0] and workspace.exists()
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert reclaim_abandoned(str(tmp_path)) == 0  # locked by its owner, this process
    workspace.close()
    assert not workspace.exists()


@pytest.mark.slow
def test_e5_the_cache_is_removed_at_exit_and_jobs_never_share_one(
    files: Callable[..., Path], _private_cache_root: Path
) -> None:
    folder = files(2)
    alive = Workspace.create(str(_private_cache_root))
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from data.conftest import RemoteFileSystem
        from databricks.air.data import UCVolumeDataset
        first = UCVolumeDataset({str(folder)!r}, filesystem=RemoteFileSystem())
        second = UCVolumeDataset({str(folder)!r}, filesystem=RemoteFileSystem())
        print(list(first)[0], list(second)[0])
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    used = [Path(p) for p in run.stdout.split()]
    assert used[0].parent != used[1].parent and used[0].name == used[1].name  # two folders, never one shared
    assert not used[0].exists() and not used[1].exists()  # removed at exit
    assert sorted(p.name for p in _private_cache_root.iterdir()) == [Path(alive.path).name]  # a live one is kept
    alive.close()
    assert not Path(alive.path).exists()


def test_e5_forkserver_workers_work_too(files: Callable[..., Path]) -> None:
    folder = files(6, size=SIZE)
    loader = DataLoader(
        UCVolumeDataset(folder, filesystem=RemoteFileSystem()),
        batch_size=3,
        num_workers=1,
        multiprocessing_context="forkserver",
        persistent_workers=False,
    )
    batches = list(loader)
    assert [len(b) for b in batches] == [3, 3]
    for batch in batches:
        _open_all(batch)


def test_a_worker_that_opens_the_cache_while_another_creates_its_lock_file_reads_zeros(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "cache.lock").touch()  # another worker created it and has not written its bytes yet
    root = volume_of(tmp_path, {"a.bin": b"data"})
    cache = file_cache(tmp_path, limit_bytes=1000)
    cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    assert cache.usage_bytes() == 4
    assert file_cache(tmp_path, limit_bytes=1000).usage_bytes() == 4  # opening it again keeps the count
