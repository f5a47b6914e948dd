"""Helpers for the data tests: folders of small files, and volume shims that count, delay or fail reads."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from databricks.air.data.cache import FileCache
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.retry import RetryPolicy


@pytest.fixture(autouse=True)
def _private_cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's data caches live under its own folder, so tests can look inside and never share one."""
    root = tmp_path / "cache-root"
    monkeypatch.setenv("DATABRICKS_AIR_DATA_CACHE_DIR", str(root))
    monkeypatch.setenv("SGC_FSLAYER_MIN_FREE_DISK_BYTES", "0")  # the CI disk may be nearly full
    return root


def make_files(folder: Path, count: int, size: int = 16, prefix: str = "f") -> List[str]:
    """``count`` files ``f0000.bin``... each of ``size`` bytes holding its own index; returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(count):
        name = f"{prefix}{index:04d}.bin"
        (folder / name).write_bytes(index.to_bytes(4, "little") * max(size // 4, 0) + bytes(size % 4))
        names.append(name)
    return names


def corrupt_largest_shard(checkpoint: Path) -> Path:
    """Flip one byte in the middle of the checkpoint's largest data file; returns that file."""
    largest = max(checkpoint.glob("*.distcp"), key=lambda path: path.stat().st_size)
    data = bytearray(largest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    largest.write_bytes(bytes(data))
    return largest


def volume_of(tmp_path: Path, contents: Dict[str, bytes]) -> Path:
    """A folder ``tmp_path/volume`` holding files ``name -> bytes``."""
    root = tmp_path / "volume"
    root.mkdir()
    for name, data in contents.items():
        (root / name).write_bytes(data)
    return root


def file_cache(
    tmp_path: Path, filesystem: Optional[VolumeFileSystem] = None, limit_bytes: Optional[int] = None
) -> FileCache:
    """A :class:`FileCache` in ``tmp_path/cache``: no free-disk floor, one attempt per copy."""
    return FileCache(
        str(tmp_path / "cache"),
        limit_bytes=limit_bytes,
        min_free_bytes=0,
        filesystem=filesystem or VolumeFileSystem(),
        retry=RetryPolicy(attempts=1, total_seconds=1.0),
    )


@pytest.fixture
def files(tmp_path: Path) -> Callable[..., Path]:
    """``files(n, size=16)`` makes a folder of ``n`` files and returns it."""

    def make(count: int, size: int = 16, name: str = "volume") -> Path:
        folder = tmp_path / name
        make_files(folder, count, size)
        return folder

    return make


class RemoteFileSystem(VolumeFileSystem):
    """A local folder that claims to be a network mount (so ``cache="auto"`` copies), counting copies per file.

    Counts live in a file when ``log`` is given, so copies made in worker processes are counted too.
    """

    def __init__(self, log: Optional[str] = None, delay: float = 0.0) -> None:
        self.log = log
        self.delay = delay
        self.copies: Counter = Counter()

    def is_local(self, path: str) -> bool:
        return False

    def copy(self, source: str, destination: str) -> None:
        if self.delay:
            time.sleep(self.delay)
        super().copy(source, destination)
        self.copies[os.path.basename(source)] += 1
        if self.log:
            with open(self.log, "a") as stream:
                stream.write(os.path.basename(source) + "\n")

    def logged(self) -> Counter:
        if not self.log or not os.path.exists(self.log):
            return Counter()
        with open(self.log) as stream:
            return Counter(line.strip() for line in stream if line.strip())


class FlakyFileSystem(RemoteFileSystem):
    """Copies of the named files fail with ``error`` the first ``failures`` times (per process)."""

    def __init__(self, failing: Dict[str, int], error: OSError, log: Optional[str] = None) -> None:
        super().__init__(log)
        self.failing = dict(failing)
        self.error = error
        self.attempts: Counter = Counter()
        self._lock = threading.Lock()

    def copy(self, source: str, destination: str) -> None:
        name = os.path.basename(source)
        with self._lock:
            self.attempts[name] += 1
            fail = self.failing.get(name, 0) >= self.attempts[name]
        if fail:
            raise type(self.error)(self.error.errno, self.error.strerror, source)
        super().copy(source, destination)
