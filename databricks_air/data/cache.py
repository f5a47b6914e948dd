"""Local copies of source files, with a hard cap on the cache's own bytes, that never evict a file in flight.

Layout (inside a :class:`~databricks.air.data.workspace.Workspace`): ``files/<relative path>`` holds the copies,
under their own names, so code that looks at a file's extension still works; ``cache.lock`` is the lock every
process of the workspace takes to change the cache. Its first 8 bytes count the bytes the cache holds (copies plus
copies in progress); the next 8 count the times a copy was removed or replaced (the *generation*).

* A copy is written to an unnamed or hidden file in the same folder and linked to its final name when complete
  (:mod:`~databricks.air.data.staging`), so no process ever sees a partial file at a final path; a copy killed
  mid-way leaves at most a hidden temporary file, and the whole workspace is reclaimed once its owner is gone.
* A copy keeps the source's size and modification time; a copy whose source no longer matches is fetched again.
* Each process remembers which copies it found fresh, for as long as the generation does not change: a warm epoch
  then checks each file with one ``stat`` of the source instead of two calls (24 bytes per listed file).
* Before a copy starts, older copies are evicted (oldest first, by the time they were copied, kept as their access
  time) until the new one fits under ``limit_bytes`` and leaves ``min_free_bytes`` free on the disk. Files that the
  caller says are pinned (positions that are in flight between the workers and the training loop) are never
  evicted; if nothing else can go, the cache goes over its limit by those files rather than stall.
* Only files under ``files/`` are ever deleted: never the source.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import struct
import threading
import time
from array import array
from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple

from databricks.air.data.control import ensure_zeroed
from databricks.air.data.errors import DataFileError, DataFilePermissionError, DataFileVanishedError
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.retry import RetryPolicy, call_with_retries
from databricks.air.data.staging import StagedFile, is_temporary

MIN_FREE_VARIABLE = "SGC_FSLAYER_MIN_FREE_DISK_BYTES"  # the reference's name for the free-disk floor
_DEFAULT_FREE_FRACTION = 0.10
_LOCK_FILE_BYTES = 16  # usage, then generation
_GENERATION = struct.Struct("<q")


def default_min_free_bytes(directory: str) -> int:
    """The free-disk floor: ``SGC_FSLAYER_MIN_FREE_DISK_BYTES`` if set, else 10 % of the cache's disk."""
    raw = os.environ.get(MIN_FREE_VARIABLE)
    if raw is not None and raw.strip():
        try:
            value = int(raw)
            if value >= 0:
                return value
        except ValueError:
            pass
        logging.getLogger("databricks.air.data").warning(
            "%s=%r is not a byte count >= 0; keeping 10%% of the disk free instead", MIN_FREE_VARIABLE, raw
        )
    usage = os.statvfs(directory)
    return int(usage.f_blocks * usage.f_frsize * _DEFAULT_FREE_FRACTION)


class FileCache:
    """Copies of one dataset's files, shared by every process of one workspace."""

    def __init__(
        self,
        directory: str,
        *,
        limit_bytes: Optional[int],
        min_free_bytes: Optional[int],
        filesystem: VolumeFileSystem,
        retry: RetryPolicy,
    ) -> None:
        self.files_dir = os.path.join(directory, "files")
        self._files_prefix = self.files_dir + os.sep
        self.lock_path = os.path.join(directory, "cache.lock")
        os.makedirs(self.files_dir, exist_ok=True)
        ensure_zeroed(self.lock_path, _LOCK_FILE_BYTES)  # every worker does this: one may be creating it now
        self.limit_bytes = limit_bytes
        self.min_free_bytes = default_min_free_bytes(self.files_dir) if min_free_bytes is None else min_free_bytes
        self.filesystem = filesystem
        self.retry = retry
        self._local: Dict[str, Any] = {}

    # -- the lock and the byte count, per process -------------------------------------------------------------

    def _process_state(self) -> Dict[str, Any]:
        # A forked child must open its own descriptor: flock on an inherited one would not exclude the parent.
        if self._local.get("pid") != os.getpid():
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CLOEXEC)
            self._local = {
                "pid": os.getpid(),
                "fd": fd,
                "thread_lock": threading.Lock(),
                "made_dirs": set(),
                "counters": mmap.mmap(fd, _LOCK_FILE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ),
                "fresh": None,
            }
        return self._local

    def _locked(self) -> "_CacheLock":
        return _CacheLock(self._process_state())

    @staticmethod
    def _read_usage(fd: int) -> int:
        return int.from_bytes(os.pread(fd, 8, 0), "little", signed=True)

    @staticmethod
    def _write_usage(fd: int, value: int) -> None:
        os.pwrite(fd, max(value, 0).to_bytes(8, "little", signed=True), 0)

    def usage_bytes(self) -> int:
        """Bytes the cache holds now, as counted (copies and copies in progress)."""
        with self._locked() as fd:
            return self._read_usage(fd)

    @staticmethod
    def _bump_generation(fd: int) -> None:
        """Tell every process that a copy was removed or replaced (after doing it, under the lock)."""
        generation = int.from_bytes(os.pread(fd, 8, 8), "little")
        os.pwrite(fd, (generation + 1).to_bytes(8, "little"), 8)

    # -- fetching ---------------------------------------------------------------------------------------------

    def hit_checker(self, root: str, files: Sequence[str]) -> Callable[[int], Optional[str]]:
        """A function ``index -> path of the fresh copy, or None``, for file ``files[index]`` under ``root``.

        The cache-hit half of :meth:`fetch`, with every name bound in advance: it runs once per file per warm
        epoch, right after the training loop has read other files and left the CPU's caches cold, where each
        attribute lookup shows. It stats the source; the copy is only ``lstat``-ed the first time this process
        sees it, or after a copy was removed or replaced anywhere (the generation changed). It never copies or
        retries: on ``None`` (a miss, or a ``stat`` that failed), call :meth:`fetch`.
        """
        stat = os.stat if type(self.filesystem).stat is VolumeFileSystem.stat else self.filesystem.stat
        lstat = os.lstat
        sources = root.rstrip("/") + "/"
        copies = self._files_prefix
        fresh = self._fresh_copies(files)
        generations, sizes, mtimes = fresh.generations, fresh.sizes, fresh.mtimes
        counters = self._process_state()["counters"]
        generation_at = _GENERATION.unpack_from

        def hit(index: int) -> Optional[str]:
            relative = files[index]
            try:
                info = stat(sources + relative)
            except OSError:
                return None
            generation = generation_at(counters, 8)[0]  # read before the lstat: a removal after it changes it again
            if generations[index] == generation and mtimes[index] == info.st_mtime_ns and sizes[index] == info.st_size:
                return copies + relative
            try:
                cached = lstat(copies + relative)  # a copy is a regular file this cache made: nothing to follow
            except OSError:
                return None
            if cached.st_mtime_ns == info.st_mtime_ns and cached.st_size == info.st_size:
                generations[index], sizes[index], mtimes[index] = generation, info.st_size, info.st_mtime_ns
                return copies + relative
            return None

        return hit

    def _fresh_copies(self, files: Sequence[str]) -> "_FreshCopies":
        state = self._process_state()
        fresh = state["fresh"]
        if fresh is None or fresh.files is not files:
            fresh = state["fresh"] = _FreshCopies(files)
        return fresh

    def fetch(self, source: str, relative: str, pinned: Callable[[], Optional[Collection[str]]]) -> str:
        """The path of a fresh local copy of ``source`` (file ``relative`` of the dataset), copying it if needed."""
        try:
            info = self.filesystem.stat(source)  # the common case, without the retry machinery
        except OSError:
            info = self._stat_with_retries(source)
        destination = self._files_prefix + relative
        try:
            cached = os.lstat(destination)
            if cached.st_size == info.st_size and cached.st_mtime_ns == info.st_mtime_ns:
                return destination
        except FileNotFoundError:
            pass
        return self._fill(source, relative, destination, info, pinned)

    def _stat_with_retries(self, source: str) -> os.stat_result:
        try:
            return call_with_retries(lambda: self.filesystem.stat(source), f"stat {source}", self.retry)
        except FileNotFoundError:
            raise DataFileVanishedError(
                f"{source} was listed when the dataset was built but is gone now (deleted or renamed during the "
                "epoch?). Build the dataset again to list the folder as it is now.",
                path=source,
            ) from None
        except OSError as error:
            raise _read_error(source, "stat", error) from error

    def _fill(
        self,
        source: str,
        relative: str,
        destination: str,
        info: os.stat_result,
        pinned: Callable[[], Optional[Collection[str]]],
    ) -> str:
        size = info.st_size
        state = self._process_state()
        counted = self.limit_bytes is not None  # without a cap, only the free-disk floor matters: no bookkeeping
        if counted or self._low_on_disk(size):
            with self._locked() as fd:
                self._make_room(fd, size, pinned, relative)
                if counted:
                    self._write_usage(fd, self._read_usage(fd) + size)
        folder = os.path.dirname(destination)
        if folder not in state["made_dirs"]:
            os.makedirs(folder, exist_ok=True)
            state["made_dirs"].add(folder)
        try:
            staged = StagedFile(destination)
        except OSError as error:
            self._give_back(counted, size)
            raise self._cannot_write(source, error) from error
        try:
            call_with_retries(lambda: self.filesystem.copy(source, staged.path), f"copy {source}", self.retry)
            staged.set_times(time.time_ns(), info.st_mtime_ns)
        except BaseException as error:
            self._give_back(counted, size)
            staged.discard()
            if not isinstance(error, OSError):
                raise
            if error.errno in (errno.ENOSPC, errno.EDQUOT) or staged.path in (error.filename, error.filename2):
                if error.filename != source or error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._cannot_write(source, error) from error
            if isinstance(error, FileNotFoundError):
                raise DataFileVanishedError(
                    f"{source} disappeared while it was being copied (deleted or renamed during the epoch?). "
                    "Build the dataset again to list the folder as it is now.",
                    path=source,
                ) from None
            raise _read_error(source, "copy", error) from error
        if counted:
            with self._locked() as fd:
                if not staged.link():
                    self._settle(fd, staged, size, info, counted)
        elif not staged.link():  # without bookkeeping, the lock is only needed when a copy is in the way
            with self._locked() as fd:
                self._settle(fd, staged, size, info, counted)
        return destination

    def _settle(self, fd: int, staged: StagedFile, size: int, info: os.stat_result, counted: bool) -> None:
        """A copy is already at ``staged``'s final name: keep it if it is as fresh, else replace it."""
        try:
            current = os.stat(staged.destination)
        except FileNotFoundError:
            staged.replace()
            return
        if current.st_size == info.st_size and current.st_mtime_ns == info.st_mtime_ns:
            staged.discard()  # another worker copied the same file first
            if counted:
                self._write_usage(fd, self._read_usage(fd) - size)
            return
        staged.replace()  # a stale copy: the new one takes its place
        self._bump_generation(fd)
        if counted:
            self._write_usage(fd, self._read_usage(fd) - current.st_size)

    def _give_back(self, counted: bool, size: int) -> None:
        """Return the bytes a copy that did not happen had reserved."""
        if counted:
            with self._locked() as fd:
                self._write_usage(fd, self._read_usage(fd) - size)

    def _cannot_write(self, source: str, error: OSError) -> OSError:
        return OSError(
            error.errno,
            f"cannot write the cached copy of {source} under {self.files_dir}: {error.strerror}. Give the cache a "
            "smaller share of the disk (cache_limit_bytes=), another disk (cache_dir=), or turn it off (cache=False)",
        )

    # -- eviction ---------------------------------------------------------------------------------------------

    def _free_disk(self) -> int:
        usage = os.statvfs(self.files_dir)
        return usage.f_bavail * usage.f_frsize

    def _low_on_disk(self, need: int) -> bool:
        return self.min_free_bytes > 0 and self._free_disk() - need < self.min_free_bytes

    def _make_room(self, fd: int, need: int, pinned: Callable[[], Optional[Collection[str]]], keep: str) -> None:
        used = self._read_usage(fd)
        over = self.limit_bytes is not None and used + need > self.limit_bytes
        low = self._low_on_disk(need)
        if not (over or low):
            return
        # Evict a little below the limit, so that a full cache is not scanned again for every new file.
        target = None if self.limit_bytes is None else self.limit_bytes - need - self.limit_bytes // 8
        free_needed = self.min_free_bytes + need - self._free_disk() if low else 0
        pins = pinned()
        if pins is None:
            return  # the caller's pass is over: it must not evict what the current pass may hold
        protected = set(pins)
        protected.add(keep)
        removed = False
        for _, size, relative in self._by_last_use():
            if relative in protected:
                continue
            if (target is None or used <= target) and free_needed <= 0:
                break
            try:
                os.unlink(os.path.join(self.files_dir, relative))
            except FileNotFoundError:
                continue
            removed = True
            used -= size
            free_needed -= size
        if removed:
            self._bump_generation(fd)
        self._write_usage(fd, used)

    def _by_last_use(self) -> List[Tuple[int, int, str]]:
        found = []
        for folder, _, names in os.walk(self.files_dir):
            for name in names:
                if is_temporary(name):
                    continue
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except FileNotFoundError:
                    continue
                found.append((info.st_atime_ns, info.st_size, os.path.relpath(path, self.files_dir)))
        found.sort()
        return found

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_local"] = {}
        return state


class _FreshCopies:
    """What one process knows to be fresh: the source size and modification time that file ``files[i]``'s copy
    matched when last checked, and the cache's generation then (-1: never checked). An entry holds only while the
    generation is unchanged; a new generation makes every entry stale at once, without touching them."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = files
        count = len(files)
        self.generations = array("q", [-1]) * count
        self.sizes = array("q", [0]) * count
        self.mtimes = array("q", [0]) * count


class _CacheLock:
    """Exclusive access to the cache across this process's threads and every other process."""

    def __init__(self, state: Dict[str, Any]) -> None:
        self._state = state

    def __enter__(self) -> int:
        self._state["thread_lock"].acquire()
        fcntl.flock(self._state["fd"], fcntl.LOCK_EX)
        return self._state["fd"]

    def __exit__(self, *exc: Any) -> None:
        fcntl.flock(self._state["fd"], fcntl.LOCK_UN)
        self._state["thread_lock"].release()


def _read_error(source: str, operation: str, error: OSError) -> DataFileError:
    if isinstance(error, PermissionError):
        return DataFilePermissionError(
            f"cannot {operation} {source}: {error}. Check that this user may read the file.", path=source
        )
    attempts = getattr(error, "attempts", 1)
    seconds = getattr(error, "seconds", 0.0)
    tried = f" after {attempts} attempts over {seconds:.1f} s" if attempts > 1 else ""
    hint = (
        " The volume may be unavailable; retries= and retry_seconds= set how long to keep trying, and "
        "on_error='skip' skips files that cannot be read."
    )
    return DataFileError(f"cannot {operation} {source}{tried}: {error}.{hint}", path=source)
