"""Each call's log folder: where it is made, and which older ones are removed so that they do not pile up.

A call's folder (``<root>/<YYYYmmdd-HHMMSS>-<function>-<random>``) holds every rank's output and the snapshot of a
hang; it stays after the call, for the user to read. Before a new one is made, the folders of older calls under the
same root are pruned: only the newest ``keep_calls`` are kept, and none idle for more than ``keep_days`` days (the
settings ``DATABRICKS_AIR_LOG_KEEP_CALLS`` and ``DATABRICKS_AIR_LOG_KEEP_DAYS``, read by
:mod:`databricks.air._settings`; ``0`` turns a limit off). "Newest" and "idle" go by the last change inside a folder.

A call still running is never pruned, however many calls start meanwhile: its caller holds a lock on the file
``.running`` in its folder (:attr:`~databricks.air._call_folder.CallFolder.lock`) for as long as the call
runs (``flock``, which the operating system lets go of when the caller dies, ``kill -9`` included). The folder gets
its name only once that lock is held (it is made under a hidden name and renamed), so another process never sees a
call's folder unlocked before its call has ended. Only folders named as this module names them are ever touched.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import time
from typing import List, Optional, Tuple

from databricks.air._call_folder import CallFolder

MAKING_SECONDS = 3600.0
"""A folder still under its hidden name this long after it was made was left by a caller that died while making it."""

_CALL_FOLDER = re.compile(r"^\d{8}-\d{6}-.*-[a-z0-9_]{8}$")


class LogFolder:
    """One call's folder, locked (see the module) until :meth:`release`."""

    def __init__(self, path: str, lock: int) -> None:
        self.path = path
        self._lock: Optional[int] = lock

    def release(self) -> None:
        """The call has ended: its folder may be pruned from now on (its lock file goes)."""
        if self._lock is None:
            return
        try:
            os.unlink(CallFolder(self.path).lock)
        except OSError:
            pass
        os.close(self._lock)  # lets go of the lock
        self._lock = None


def make(function_name: str, where: str, keep_calls: int, keep_days: float) -> LogFolder:
    """A new folder under ``where`` for a call of ``function_name``, locked, after pruning older calls' folders."""
    os.makedirs(where, exist_ok=True)
    prune(where, keep_calls, keep_days, room_for=1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in function_name)[:60]
    hidden = tempfile.mkdtemp(prefix=f".{stamp}-{safe}-", dir=where)
    lock = os.open(CallFolder(hidden).lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # nobody else knows this folder yet: taken at once
        path = os.path.join(where, os.path.basename(hidden)[1:])
        os.rename(hidden, path)
    except BaseException:
        os.close(lock)
        shutil.rmtree(hidden, ignore_errors=True)
        raise
    return LogFolder(path, lock)


def describe_limits(keep_calls: int, keep_days: float) -> str:
    """What is kept, for the line that prints a call's folder: ``kept: newest 50 calls, 7 days``."""
    parts = [f"newest {keep_calls} calls" if keep_calls else "", f"{keep_days:g} days" if keep_days else ""]
    shown = ", ".join(part for part in parts if part)
    return f"kept: {shown}" if shown else "kept until removed"


def prune(where: str, keep_calls: int, keep_days: float, now: Optional[float] = None, room_for: int = 0) -> List[str]:
    """Remove the call folders under ``where`` past the limits, leaving ``room_for`` of ``keep_calls`` for folders
    about to be made, and never a running call's; return the paths removed. Never raises: a folder that cannot be
    removed (another user's, say) stays."""
    now = time.time() if now is None else now
    _remove_unfinished(where, now)
    if not keep_calls and not keep_days:
        return []
    folders = sorted(_call_folders(where), reverse=True)  # most recently changed first
    removed = []
    for index, (changed, path) in enumerate(folders):
        too_old = bool(keep_days) and now - changed > keep_days * 86400
        too_many = bool(keep_calls) and index >= keep_calls - room_for
        if (too_old or too_many) and not running(path):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
    return removed


def running(path: str) -> bool:
    """Whether the call of the folder ``path`` is still running: its caller holds the lock (see the module)."""
    try:
        lock = os.open(CallFolder(path).lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: the call has ended (or its caller died before the folder was renamed)
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(lock)
    return False


def _remove_unfinished(where: str, now: float) -> None:
    """Folders still under their hidden name long after they were made: their callers died making them."""
    try:
        entries = [
            entry for entry in os.scandir(where) if entry.name.startswith(".") and _CALL_FOLDER.match(entry.name[1:])
        ]
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and now - entry.stat().st_mtime > MAKING_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


def _call_folders(where: str) -> List[Tuple[float, str]]:
    found = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return []
    for entry in entries:
        if not _CALL_FOLDER.match(entry.name):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            found.append((_last_change(entry.path, entry.stat(follow_symlinks=False).st_mtime), entry.path))
        except OSError:
            continue
    return found


def _last_change(path: str, folder_mtime: float) -> float:
    """The folder's own time or that of its newest direct entry (a rank log grows while its call runs)."""
    latest = folder_mtime
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue
    except OSError:
        pass
    return latest
