"""What a run does with each migrated file: write it in place, print its diff, say it would change, copy it to
``--out-dir``, or print it on standard output (for ``-``)."""

from __future__ import annotations

import abc
import codecs
from typing import ClassVar, Optional, TextIO

from air_migrate.colors import Palette
from air_migrate.diffing import paint_diff, render_diff
from air_migrate.results import FileResult
from air_migrate.sources import is_notebook
from air_migrate.writing import OutputTree, WriteError, write_atomically


class Mode(abc.ABC):
    """One way of delivering results; ``dry`` modes write nothing and exit 1 when anything would change."""

    name: ClassVar[str]
    dry: ClassVar[bool] = False
    verb: str = "changed"
    """How the summary says what happened to changed files."""

    @abc.abstractmethod
    def deliver(self, result: FileResult) -> Optional[str]:
        """Act on one file's result; return why it could not be written, if it could not."""


class InPlace(Mode):
    """The default: changed files are replaced atomically; unchanged files are not touched at all."""

    name = "write"

    def deliver(self, result: FileResult) -> Optional[str]:
        if result.error is None and result.changed:
            try:
                write_atomically(result.path, result.migrated, result.original)  # type: ignore[arg-type]
            except WriteError as error:
                return str(error)
        return None


class Check(Mode):
    """``--check``: a ``path: would change`` line per file that would change."""

    name = "check"
    dry = True
    verb = "would change"

    def __init__(self, stream: TextIO, palette: Palette) -> None:
        self._stream = stream
        self._palette = palette

    def deliver(self, result: FileResult) -> Optional[str]:
        if result.error is None and result.changed:
            self._stream.write(f"{self._palette.paint(result.path, 'bold')}: would change\n")
        return None


class Diff(Mode):
    """``--diff``: the unified diff of every file that would change, on standard output."""

    name = "diff"
    dry = True
    verb = "would change"

    def __init__(self, stream: TextIO, palette: Palette, diff_format: str) -> None:
        self._stream = stream
        self._palette = palette
        self._format = diff_format

    def deliver(self, result: FileResult) -> Optional[str]:
        if result.error is None and result.changed:
            notebook = is_notebook(result.path, result.original)
            text = paint_diff(render_diff(result, result.path, notebook, self._format), self._palette)
            buffer = getattr(self._stream, "buffer", None)
            if codecs.lookup(result.encoding).name == "utf-8" or buffer is None:
                self._stream.write(text)
            else:  # a patch holds the file's own bytes, or git cannot apply it
                self._stream.flush()
                buffer.write(text.encode(result.encoding, errors="replace"))  # (only a header's path can fail)
                buffer.flush()
        return None


class CopyToTree(Mode):
    """``--out-dir``: every scanned file written under the output directory, migrated or as it was."""

    name = "out-dir"

    def __init__(self, tree: OutputTree) -> None:
        self._tree = tree
        self.verb = f"changed in {tree.directory}"

    def deliver(self, result: FileResult) -> Optional[str]:
        if result.error is not None and not result.original:
            return None  # it could not even be read: there is nothing to copy
        data = result.migrated if result.error is None and result.changed else result.original
        try:
            self._tree.write(result.path, data)  # type: ignore[arg-type]
        except WriteError as error:
            return str(error)
        return None


class ToStandardOutput(Mode):
    """``-`` in write mode: the migrated code (or the input as it was) on standard output, byte for byte."""

    name = "stdin"

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def deliver(self, result: FileResult) -> Optional[str]:
        data = result.migrated if result.error is None and result.changed else result.original
        self._stream.flush()
        buffer = getattr(self._stream, "buffer", None)
        if buffer is not None:
            buffer.write(data)
            buffer.flush()
        else:
            self._stream.write(data.decode(result.encoding, errors="surrogateescape"))  # type: ignore[union-attr]
        return None
