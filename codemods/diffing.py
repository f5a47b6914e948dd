"""Unified diffs of what a run would change, as patches ``git apply`` accepts.

A file diff has ``a/<path>`` and ``b/<path>`` headers with the path relative to the current directory, splits lines
on ``\\n`` only (a CRLF line keeps its ``\\r`` as content, as git expects), and marks a last line without a newline
the way git does. Notebooks are shown cell by cell by default (``--- nb.ipynb:cell 3``), which reads far better
than a diff of their JSON; ``--diff=json`` gives the raw JSON diff for ``git apply``.
"""

from __future__ import annotations

import difflib
import os
from typing import Iterable, List

from air_migrate.colors import Palette
from air_migrate.results import FileResult

CELLS = "cells"
JSON = "json"
FORMATS = (CELLS, JSON)
_NO_NEWLINE = "\\ No newline at end of file\n"


def render_diff(result: FileResult, display_path: str, notebook: bool, diff_format: str = CELLS) -> str:
    """The diff of one changed file: per cell for a notebook in the ``cells`` format, else of the whole file."""
    if diff_format == CELLS and notebook and result.cells:
        return cell_diffs(result, display_path)
    return file_diff(result.original, result.migrated or result.original, display_path)


def file_diff(before: bytes, after: bytes, display_path: str) -> str:
    """A unified diff of two versions of a file, with git's ``a/`` and ``b/`` headers."""
    relative = patch_path(display_path)
    return _unified(_lines(before.decode("utf-8")), _lines(after.decode("utf-8")), f"a/{relative}", f"b/{relative}")


def cell_diffs(result: FileResult, display_path: str) -> str:
    """One unified diff per changed cell, headed ``path:cell N`` (N 1-based, counting every cell)."""
    pieces = []
    for number, (before, after) in sorted(result.cells.items()):
        header = f"{display_path}:cell {number}"
        pieces.append(_unified(_lines(before), _lines(after), header, header))
    return "".join(pieces)


def patch_path(path: str) -> str:
    """The path as a patch names it: relative to the current directory when inside it, with ``/`` separators."""
    absolute = os.path.abspath(path)
    here = os.getcwd()
    inside = os.path.commonpath([absolute, here]) == here
    return (os.path.relpath(absolute) if inside else path).replace(os.sep, "/")


def paint_diff(text: str, palette: Palette) -> str:
    """Colour a diff line by line (headers bold, hunks cyan, removals red, additions green)."""
    if not palette.enabled:
        return text
    out: List[str] = []
    for line in _lines(text):
        body = line.rstrip("\n")
        ending = line[len(body):]
        if body.startswith(("--- ", "+++ ")):
            style = "bold"
        elif body.startswith("@@"):
            style = "cyan"
        elif body.startswith("-"):
            style = "red"
        elif body.startswith("+"):
            style = "green"
        else:
            out.append(line)
            continue
        out.append(palette.paint(body, style) + ending)
    return "".join(out)


def _lines(text: str) -> List[str]:
    """Lines as git sees them: split on ``\\n`` only (``str.splitlines`` also splits on form feeds and more)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _unified(before: List[str], after: List[str], old_name: str, new_name: str) -> str:
    return "".join(_mark_missing_newlines(difflib.unified_diff(before, after, old_name, new_name)))


def _mark_missing_newlines(lines: Iterable[str]) -> Iterable[str]:
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n" + _NO_NEWLINE
