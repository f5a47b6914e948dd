"""Errors raised by ``databricks.air.data``.

The reference raises :class:`ValueError` for a path that is missing or not a folder, :class:`TypeError` for a
dataset that cannot be checkpointed, and :class:`RuntimeError` when a file cannot be read after its retries. Each
class here keeps that base, so ``except`` clauses written for the reference still catch it, and adds the precise
built-in class a Python user expects (a missing folder is also a :class:`FileNotFoundError`).

Every error keeps its class, message and attributes across processes (DataLoader workers, DCP's gathers, ranks,
Ray): see :mod:`databricks.air._rebuildable`.
"""

from __future__ import annotations

import errno
from typing import Optional

from databricks.air._rebuildable import RebuildableError

__all__ = [
    "DataPathNotFoundError",
    "DataPathNotADirectoryError",
    "EmptyDatasetError",
    "DataFileError",
    "DataFileVanishedError",
    "DataFilePermissionError",
    "RankMismatchError",
    "StateMismatchError",
    "IncompleteCheckpointError",
    "CorruptCheckpointError",
    "LoaderPositionError",
]


class DataPathNotFoundError(RebuildableError, FileNotFoundError, ValueError):
    """The dataset's folder does not exist."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(errno.ENOENT, message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class DataPathNotADirectoryError(RebuildableError, NotADirectoryError, ValueError):
    """The dataset's path is a file, not a folder."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(errno.ENOTDIR, message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class EmptyDatasetError(ValueError):
    """The folder holds no file that the dataset would yield."""


class DataFileError(RebuildableError, RuntimeError):
    """A file of the dataset could not be read, after its retries where the error was worth retrying.

    Attributes:
        path: the file (``None`` when the error was rebuilt from its text alone, as torch's DataLoader does with
            a worker's exception: the message still names the file).
        message: what happened and what to do.
    """

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return self.message


class DataFileVanishedError(DataFileError, FileNotFoundError):
    """A file that was listed when the dataset was built is gone when it is read."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        DataFileError.__init__(self, message, path=path)
        self.errno = errno.ENOENT
        self.filename = path


class DataFilePermissionError(DataFileError, PermissionError):
    """A file of the dataset may not be read by this user (never retried)."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        DataFileError.__init__(self, message, path=path)
        self.errno = errno.EACCES
        self.filename = path


class RankMismatchError(ValueError):
    """The ranks disagree on what they iterate: the files they see, or settings that must be equal on every rank."""


class StateMismatchError(ValueError):
    """A saved state does not fit this dataset or loader (another folder, another world size, another rank)."""


class IncompleteCheckpointError(RebuildableError, FileNotFoundError):
    """A checkpoint directory has no ``.metadata``: its save did not finish, or it is not a checkpoint."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(errno.ENOENT, message, path)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message


class CorruptCheckpointError(RebuildableError, ValueError):
    """A checkpoint file's bytes do not match the checksums recorded when it was saved.

    Attributes:
        path: the damaged file (``None`` when rebuilt from its text alone).
        message: what happened and what to do.
        offset: the first byte of the block that failed its check, where one did.
    """

    def __init__(self, message: str, *, path: Optional[str] = None, offset: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.offset = offset

    def __str__(self) -> str:
        return self.message


class LoaderPositionError(RebuildableError, StateMismatchError):
    """:meth:`Checkpointer.restore <databricks.air.data.Checkpointer.restore>` restored a checkpoint but not the
    loader position in it, which was saved on another number of ranks.

    Everything else was restored before this was raised: catch it to go on from ``step``.

    Attributes:
        message: what was restored, and why the position was not.
        path: the restored checkpoint's folder.
        step: the step of the restored checkpoint.
        epoch: the epoch the loader was in when it was saved (``None`` for a loader without epochs).
        saved_world_size: the number of ranks that saved the checkpoint.
        world_size: this run's number of ranks.
    """

    step: Optional[int] = None
    epoch: Optional[int] = None
    saved_world_size: Optional[int] = None
    world_size: Optional[int] = None

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message
