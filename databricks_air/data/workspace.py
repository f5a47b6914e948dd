"""A private local folder per iterating process: the file cache and the DataLoader's control block live there.

Each folder is ``<root>/ws-<pid>-<random>``, so two jobs on one host never share one. Its owner holds an
exclusive ``flock`` on ``owner.lock`` for as long as it lives (taken before the file has that name; forked
DataLoader workers inherit the lock), and removes the folder when it exits normally or when the dataset is
garbage-collected. A folder left by a process that was killed is found by the next :meth:`Workspace.create` under
the same root: its lock can be taken, so its owner is gone, and the folder is removed.

The root is ``cache_dir=``, else ``DATABRICKS_AIR_DATA_CACHE_DIR``, else ``<temp dir>/databricks-air-data``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Dict, Optional

from databricks.air import _variables

_PREFIX = "ws-"
_LOCK_NAME = "owner.lock"
_YOUNG_SECONDS = 60.0  # a folder this young without its lock file may still be being created

_log = logging.getLogger("databricks.air.data")


def default_root() -> str:
    return os.environ.get(_variables.DATA_CACHE_DIR) or os.path.join(tempfile.gettempdir(), "databricks-air-data")


class Workspace:
    """One process's private folder. Copies in forked or spawned workers refer to it but never remove it."""

    def __init__(self, path: str, owner_pid: int) -> None:
        self.path = path
        self.owner_pid = owner_pid
        self._finalizer: Optional[weakref.finalize] = None

    @classmethod
    def create(cls, root: Optional[str] = None) -> "Workspace":
        """Make a new workspace under ``root``, first removing the ones whose owners are gone."""
        root = os.path.abspath(root or default_root())
        try:
            os.makedirs(root, exist_ok=True)
        except OSError as error:
            raise OSError(
                error.errno,
                f"cannot create the data cache folder {root}: {error.strerror}. Pass cache_dir= (or set "
                f"{_variables.DATA_CACHE_DIR}) to a writable local folder",
            ) from error
        reclaim_abandoned(root)
        path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root)
        # The lock is taken under another name, then renamed into place: another process's reclaim_abandoned that
        # finds owner.lock finds it locked, never in the moment between its creation and this flock (it would take
        # the lock itself and remove the folder from under its new owner).
        taking = os.path.join(path, _LOCK_NAME + ".new")
        descriptor = os.open(taking, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.rename(taking, os.path.join(path, _LOCK_NAME))
        workspace = cls(path, os.getpid())
        workspace._finalizer = weakref.finalize(workspace, _remove, path, os.getpid(), descriptor)
        return workspace

    @property
    def owned_here(self) -> bool:
        return self.owner_pid == os.getpid()

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def close(self) -> None:
        """Remove the folder now (owner only; a no-op elsewhere)."""
        if self._finalizer is not None:
            self._finalizer()

    def __getstate__(self) -> Dict[str, Any]:
        return {"path": self.path, "owner_pid": self.owner_pid}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.path = state["path"]
        self.owner_pid = state["owner_pid"]
        self._finalizer = None


def _remove(path: str, owner_pid: int, descriptor: int) -> None:
    if os.getpid() != owner_pid:
        return
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.close(descriptor)
    except OSError:
        pass


def reclaim_abandoned(root: str) -> int:
    """Remove workspaces under ``root`` whose owner process is gone; return how many were removed."""
    removed = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        path = os.path.join(root, name)
        try:
            descriptor = os.open(os.path.join(path, _LOCK_NAME), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            try:
                if time.time() - os.stat(path).st_mtime > _YOUNG_SECONDS:
                    shutil.rmtree(path, ignore_errors=True)
                    removed += 1
            except OSError:
                pass
            continue
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(descriptor)  # its owner is alive
            continue
        _log.info("removing the data cache %s left by a process that ended without cleaning up", path)
        shutil.rmtree(path, ignore_errors=True)
        os.close(descriptor)
        removed += 1
    return removed
