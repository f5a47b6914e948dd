"""What a dataset keeps on local disk in one process: its workspace, and the control block and file cache in it.

Everything is made when first needed: a dataset that reads a local folder in place with no workers never makes a
folder. A copy of the storage in a DataLoader worker (forked or spawned) shares its main process's workspace, so
the worker's copies land in the same cache and it reads the same control block; a worker of a plain torch
DataLoader started after that workspace is gone makes its own.
"""

from __future__ import annotations

import os
from typing import Optional

from databricks.air.data.cache import FileCache
from databricks.air.data.control import Control
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.retry import RetryPolicy
from databricks.air.data.workspace import Workspace


class LocalStorage:
    """A dataset's workspace (``workspace``, ``None`` until needed), control block and file cache."""

    def __init__(
        self,
        root: Optional[str],
        *,
        limit_bytes: Optional[int],
        min_free_bytes: Optional[int],
        filesystem: VolumeFileSystem,
        retry: RetryPolicy,
    ) -> None:
        self.root = root
        self.workspace: Optional[Workspace] = None
        self._limit_bytes = limit_bytes
        self._min_free_bytes = min_free_bytes
        self._filesystem = filesystem
        self._retry = retry
        self._control: Optional[Control] = None
        self._cache: Optional[FileCache] = None

    def ensure_workspace(self) -> Workspace:
        """This process's own workspace, made anew when there is none, it is another process's, or it is gone."""
        workspace = self.workspace
        if workspace is None or not workspace.owned_here or not workspace.exists():
            self.workspace = workspace = Workspace.create(self.root)
            self._cache = self._control = None
        return workspace

    def control(self, shared: bool) -> Control:
        """The control block for a pass begun in this process: a file in the workspace when other processes read
        it (``shared``: workers, or the cache's eviction) or a workspace exists anyway, else in memory."""
        if not shared and self.workspace is None:
            return Control()
        path = os.path.join(self.ensure_workspace().path, "control")
        if self._control is None or self._control.path != path:
            self._control = Control(path)
        return self._control

    def cache(self) -> FileCache:
        """The file cache, in the workspace this copy refers to (its main process's, in a DataLoader worker)."""
        if self._cache is None:
            workspace = self.workspace
            if workspace is None or not workspace.exists():
                workspace = self.ensure_workspace()  # a worker of a plain torch DataLoader: its own copies
            self._cache = FileCache(
                workspace.path,
                limit_bytes=self._limit_bytes,
                min_free_bytes=self._min_free_bytes,
                filesystem=self._filesystem,
                retry=self._retry,
            )
        return self._cache

    def close(self) -> None:
        """Remove this process's workspace now, with its copies (a no-op in a process that does not own it)."""
        if self.workspace is not None:
            self.workspace.close()
        self.workspace = self._control = self._cache = None
