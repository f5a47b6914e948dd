"""Putting migrated files on disk: in place, atomically, or as copies in an output directory.

In place, a file is replaced in one step (a temporary file in the same directory, flushed to disk, then renamed
over it), keeping its mode bits; a symlink stays a link and its target is edited. A file that changed on disk while
the run was reading it is not overwritten. ``--out-dir`` writes every scanned file (migrated or as it was) under a
new directory, keeping the layout below the inputs' common directory, and never touches the inputs.
"""

from __future__ import annotations

import os
import stat
from typing import AbstractSet, Iterable, Sequence


class WriteError(Exception):
    """A file could not be written; the message says which and why."""


def write_atomically(path: str, data: bytes, expected: bytes) -> None:
    """Replace the content of ``path`` (which must still hold ``expected``) with ``data`` in one step."""
    target = os.path.realpath(path)
    try:
        with open(target, "rb") as stream:
            current = stream.read()
    except OSError as error:
        raise WriteError(f"cannot read it again before writing: {error.strerror or error}") from None
    if current != expected:
        raise WriteError("it changed on disk while air-migrate ran; it was left as it is, run air-migrate again")
    _replace(target, data, stat.S_IMODE(os.stat(target).st_mode))


def _replace(target: str, data: bytes, mode: int) -> None:
    import tempfile  # (only when a file is written: --check and --diff never need it)

    directory = os.path.dirname(target) or "."
    try:
        handle, temporary = tempfile.mkstemp(prefix=".air-migrate-", dir=directory)
    except OSError as error:
        raise WriteError(f"cannot write in {directory}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise WriteError(f"cannot write it: {error.strerror or error}") from None
        raise


class OutputTree:
    """The ``--out-dir`` directory: where each input's copy goes, checked before anything is written."""

    def __init__(self, directory: str, inputs: Sequence[str], force: bool) -> None:
        """Check ``directory`` against the command-line ``inputs``; raise ``ValueError`` with what to do."""
        self.directory = directory
        self.root = _common_directory(inputs)
        if os.path.lexists(directory) and not os.path.isdir(directory):
            raise ValueError(f"--out-dir {directory} exists and is not a directory")
        if os.path.isdir(directory) and not force:
            raise ValueError(
                f"--out-dir {directory} already exists: name a new directory, or add --force to write "
                "into it (files of the same name there are replaced)"
            )
        if os.path.realpath(directory) == os.path.realpath(self.root):
            raise ValueError(
                f"--out-dir {directory} is the inputs' own directory: the copies would replace the "
                "inputs (to migrate in place, leave out --out-dir)"
            )

    @property
    def real_directory(self) -> str:
        return os.path.realpath(self.directory)

    def target(self, path: str) -> str:
        """Where the copy of the input ``path`` goes."""
        return os.path.join(self.directory, os.path.relpath(os.path.abspath(path), self.root))

    def check_targets(self, paths: Iterable[str]) -> None:
        """Refuse a run in which a copy would land on one of the inputs."""
        paths = list(paths)
        inputs: AbstractSet[str] = {os.path.realpath(path) for path in paths}
        clashes = sorted(inputs & {os.path.realpath(self.target(path)) for path in paths})
        if clashes:
            raise ValueError(
                f"--out-dir {self.directory} would put a copy over the input {clashes[0]}: choose a "
                "directory outside the inputs"
            )

    def create(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as error:
            raise ValueError(f"--out-dir {self.directory} cannot be created: {error.strerror or error}") from None

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` as the copy of ``path``, with the input's mode bits."""
        target = self.target(path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError as error:
            raise WriteError(f"cannot write its copy {target}: {error.strerror or error}") from None
        if os.path.islink(target) or (os.path.lexists(target) and not os.path.isfile(target)):
            raise WriteError(f"its copy {target} would replace something that is not a plain file")
        _replace(target, data, mode)


def _common_directory(inputs: Sequence[str]) -> str:
    """The deepest directory holding every input (a directory input counts as itself)."""
    directories = [
        os.path.abspath(path) if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)) for path in inputs
    ]
    return os.path.commonpath(directories)
