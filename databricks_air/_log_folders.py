"""Each call's log folder: where it is made, and which older ones are removed so that they do not pile up.

A call's folder (``<root>/<YYYYmmdd-HHMMSS>-<function>-<random>``) holds every rank's output and the snapshot of a
hang; it stays after the call, for the user to read. Before a new one is made, the folders of older calls under the
same root are pruned: only the newest :data:`DEFAULT_KEEP_CALLS` are kept, and none idle for more than
:data:`DEFAULT_KEEP_DAYS` days (both set by environment variables; ``0`` turns a limit off). "Newest" and "idle" go
by the last change inside a folder, so that a call still running (its ranks write their logs) is never removed from
under it by another process's call. Only folders named as this module names them are ever touched.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from typing import List, Optional, Tuple

from databricks.air import _variables
from databricks.air.exceptions import RuntimeConfigurationError

DEFAULT_KEEP_CALLS = 50
DEFAULT_KEEP_DAYS = 7.0
ACTIVE_SECONDS = 3600.0
"""A folder changed this recently may belong to a call that is still running: it is never removed by count."""

_CALL_FOLDER = re.compile(r"^\d{8}-\d{6}-.*-[a-z0-9_]{8}$")


def root() -> str:
    """Where call folders are made: ``DATABRICKS_AIR_LOG_DIR``, else ``databricks-air-logs`` in the temp folder."""
    return os.environ.get(_variables.LOG_DIR) or os.path.join(tempfile.gettempdir(), "databricks-air-logs")


def make(function_name: str) -> str:
    """A new folder for a call of ``function_name``, after pruning older calls' folders (see the module)."""
    where = root()
    os.makedirs(where, exist_ok=True)
    keep_calls, keep_days = limits()
    prune(where, keep_calls, keep_days, room_for=1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in function_name)[:60]
    return tempfile.mkdtemp(prefix=f"{stamp}-{safe}-", dir=where)


def limits() -> Tuple[int, float]:
    """``(calls, days)`` to keep, from ``DATABRICKS_AIR_LOG_KEEP_CALLS`` and ``DATABRICKS_AIR_LOG_KEEP_DAYS``."""
    return (int(_number(_variables.LOG_KEEP_CALLS, DEFAULT_KEEP_CALLS, whole=True)),
            _number(_variables.LOG_KEEP_DAYS, DEFAULT_KEEP_DAYS, whole=False))


def describe_limits() -> str:
    """What is kept, for the line that prints a call's folder: ``kept: newest 50 calls, 7 days``."""
    calls, days = limits()
    parts = [f"newest {calls} calls" if calls else "", f"{days:g} days" if days else ""]
    shown = ", ".join(part for part in parts if part)
    return f"kept: {shown}" if shown else "kept until removed"


def prune(where: str, keep_calls: int, keep_days: float, now: Optional[float] = None, room_for: int = 0) -> List[str]:
    """Remove the call folders under ``where`` past the limits, leaving ``room_for`` of ``keep_calls`` for folders
    about to be made; return the paths removed. Never raises: a folder that cannot be removed (another user's, say)
    stays."""
    if not keep_calls and not keep_days:
        return []
    now = time.time() if now is None else now
    folders = sorted(_call_folders(where), reverse=True)  # most recently changed first
    removed = []
    for index, (changed, path) in enumerate(folders):
        too_old = bool(keep_days) and now - changed > keep_days * 86400
        too_many = bool(keep_calls) and index >= keep_calls - room_for and now - changed > ACTIVE_SECONDS
        if too_old or too_many:
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
    return removed


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


def _number(variable: str, default: float, whole: bool) -> float:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = -1
    if value < 0:
        kind = "a whole number" if whole else "a number"
        raise RuntimeConfigurationError(f"{variable} must be {kind} >= 0 (0 keeps every folder), not {text!r}")
    return value
