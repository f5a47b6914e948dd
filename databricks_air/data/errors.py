"""Errors raised by ``databricks.air.data``.

The reference raises :class:`ValueError` for a path that is missing or not a folder, :class:`TypeError` for a
dataset that cannot be checkpointed, and :class:`RuntimeError` when a file cannot be read after its retries. Each
class here keeps that base, so ``except`` clauses written for the reference still catch it, and adds the precise
built-in class a Python user expects (a missing folder is also a :class:`FileNotFoundError`).
"""

from __future__ import annotations

import errno
from typing import Optional

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
]


class DataPathNotFoundError(FileNotFoundError, ValueError):
    """The dataset's folder does not exist."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(errno.ENOENT, message, path)

    def __str__(self) -> str:
        return self.strerror


class DataPathNotADirectoryError(NotADirectoryError, ValueError):
    """The dataset's path is a file, not a folder."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(errno.ENOTDIR, message, path)

    def __str__(self) -> str:
        return self.strerror


class EmptyDatasetError(ValueError):
    """The folder holds no file that the dataset would yield."""


class DataFileError(RuntimeError):
    """A file of the dataset could not be read, after its retries where the error was worth retrying."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return self.message


class DataFileVanishedError(DataFileError, FileNotFoundError):
    """A file that was listed when the dataset was built is gone when it is read."""

    def __init__(self, path: str, message: str) -> None:
        DataFileError.__init__(self, path, message)
        self.errno = errno.ENOENT
        self.filename = path


class DataFilePermissionError(DataFileError, PermissionError):
    """A file of the dataset may not be read by this user (never retried)."""

    def __init__(self, path: str, message: str) -> None:
        DataFileError.__init__(self, path, message)
        self.errno = errno.EACCES
        self.filename = path


class RankMismatchError(ValueError):
    """The ranks disagree on what they iterate: the files they see, or settings that must be equal on every rank."""


class StateMismatchError(ValueError):
    """A saved state does not fit this dataset or loader (another folder, another world size, another rank)."""


class IncompleteCheckpointError(FileNotFoundError):
    """A checkpoint directory has no ``.metadata``: its save did not finish, or it is not a checkpoint."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(errno.ENOENT, message, path)

    def __str__(self) -> str:
        return self.strerror


class CorruptCheckpointError(ValueError):
    """A checkpoint file's bytes do not match the checksums recorded when it was saved."""

    def __init__(self, path: str, message: str, offset: Optional[int] = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
