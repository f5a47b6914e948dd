"""Unified diffs of what a run would change, as patches ``git apply`` accepts.

A file diff has ``a/<path>`` and ``b/<path>`` headers with the path relative to the current directory, splits lines
on ``\\n`` only (a CRLF line keeps its ``\\r`` as content, as git expects), and marks a last line without a newline
the way git does. Notebooks are shown cell by cell by default (``--- nb.ipynb:cell 3``), which reads far better
than a diff of their JSON; ``--diff=json`` gives the raw JSON diff for ``git apply``.

A diff holds only the changed lines and three lines of context around them. :func:`difflib.unified_diff` does not
promise that: on 200 lines or more its matcher treats every line that makes up more than 1 % of the file as junk
(its *autojunk* heuristic), blank lines first, so unchanged blank lines show as removed and added. The lines are
matched here as git's patience diff matches them: the common start and end first, then the lines found once on
each side, in order, as anchors, and the rest between two anchors with :class:`difflib.SequenceMatcher` without
that heuristic (a gap between anchors is small, where its cost, quadratic at worst, does not matter).
"""

from __future__ import annotations

import bisect
import difflib
import os
from typing import Dict, Iterable, List, Sequence, Tuple

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
    return file_diff(result.original, result.migrated or result.original, display_path, result.encoding)


def file_diff(before: bytes, after: bytes, display_path: str, encoding: str = "utf-8") -> str:
    """A unified diff of two versions of a file in ``encoding``, with git's ``a/`` and ``b/`` headers."""
    relative = patch_path(display_path)
    return _unified(_lines(before.decode(encoding)), _lines(after.decode(encoding)), f"a/{relative}", f"b/{relative}")


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
        ending = line[len(body) :]
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
    groups = _grouped(_opcodes(_matching_lines(before, after), len(before), len(after)))
    if not groups:
        return ""
    out = [f"--- {old_name}\n", f"+++ {new_name}\n"]
    for group in groups:
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out.extend(" " + line for line in before[i1:i2])
                continue
            out.extend("-" + line for line in before[i1:i2])
            out.extend("+" + line for line in after[j1:j2])
    return "".join(_mark_missing_newlines(out))


_CONTEXT = 3
_SMALL_GAP = 1_000_000
"""Pairs of lines (one side's count times the other's) up to which a gap between anchors is matched exactly."""
Opcode = Tuple[str, int, int, int, int]


def _matching_lines(before: Sequence[str], after: Sequence[str]) -> List[Tuple[int, int]]:
    """Pairs ``(i, j)`` of equal lines, increasing on both sides, as many as the method above finds."""
    found: List[Tuple[int, int]] = []
    stack = [(0, len(before), 0, len(after))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        while alo < ahi and blo < bhi and before[alo] == after[blo]:
            found.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and before[ahi - 1] == after[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            found.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        anchors = _unique_anchors(before, after, alo, ahi, blo, bhi)
        if anchors:
            edges = [(alo - 1, blo - 1), *anchors, (ahi, bhi)]
            found.extend(anchors)
            stack.extend((i + 1, k, j + 1, m) for (i, j), (k, m) in zip(edges, edges[1:]))
        elif (ahi - alo) * (bhi - blo) <= _SMALL_GAP:
            matcher = difflib.SequenceMatcher(None, before[alo:ahi], after[blo:bhi], autojunk=False)
            found.extend(
                (alo + i + k, blo + j + k) for i, j, size in matcher.get_matching_blocks() for k in range(size)
            )
    return sorted(found)


def _unique_anchors(
    before: Sequence[str], after: Sequence[str], alo: int, ahi: int, blo: int, bhi: int
) -> List[Tuple[int, int]]:
    """The lines found exactly once on each side of the gap, paired, the longest run increasing on both sides."""
    counts: Dict[str, List[int]] = {}
    for i in range(alo, ahi):
        entry = counts.setdefault(before[i], [0, 0, i, -1])
        entry[0] += 1
    for j in range(blo, bhi):
        counted = counts.get(after[j])
        if counted is not None:
            counted[1] += 1
            counted[3] = j
    pairs = sorted((i, j) for seen_a, seen_b, i, j in counts.values() if seen_a == 1 and seen_b == 1)
    # Longest increasing run of j over the pairs (patience sorting).
    tails: List[int] = []
    tail_index: List[int] = []
    previous: List[int] = []
    for index, (_, j) in enumerate(pairs):
        place = bisect.bisect_left(tails, j)
        if place == len(tails):
            tails.append(j)
            tail_index.append(index)
        else:
            tails[place] = j
            tail_index[place] = index
        previous.append(tail_index[place - 1] if place else -1)
    run: List[Tuple[int, int]] = []
    index = tail_index[-1] if tail_index else -1
    while index >= 0:
        run.append(pairs[index])
        index = previous[index]
    return run[::-1]


def _opcodes(matches: Sequence[Tuple[int, int]], length_a: int, length_b: int) -> List[Opcode]:
    """What :meth:`difflib.SequenceMatcher.get_opcodes` gives, from the matched pairs."""
    codes: List[Opcode] = []
    i = j = 0
    for ai, bj in [*matches, (length_a, length_b)]:
        if i < ai or j < bj:
            tag = "replace" if i < ai and j < bj else ("delete" if i < ai else "insert")
            codes.append((tag, i, ai, j, bj))
        if ai < length_a and bj < length_b:
            if codes and codes[-1][0] == "equal" and codes[-1][2] == ai:
                codes[-1] = ("equal", codes[-1][1], ai + 1, codes[-1][3], bj + 1)
            else:
                codes.append(("equal", ai, ai + 1, bj, bj + 1))
        i, j = ai + 1, bj + 1
    return codes


def _grouped(codes: List[Opcode]) -> List[List[Opcode]]:
    """The hunks: each change with up to three unchanged lines around it, hunks closer than that merged."""
    if not any(tag != "equal" for tag, *_ in codes):
        return []
    codes = list(codes)
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = (tag, max(i1, i2 - _CONTEXT), i2, max(j1, j2 - _CONTEXT), j2)
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = (tag, i1, min(i2, i1 + _CONTEXT), j1, min(j2, j1 + _CONTEXT))
    groups: List[List[Opcode]] = []
    group: List[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * _CONTEXT:
            group.append((tag, i1, i1 + _CONTEXT, j1, j1 + _CONTEXT))
            groups.append(group)
            group = []
            i1, j1 = i2 - _CONTEXT, j2 - _CONTEXT
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return groups


def _range(start: int, stop: int) -> str:
    """A hunk header's range as ``diff -u`` writes it: 1-based start, and the length unless it is 1."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _mark_missing_newlines(lines: Iterable[str]) -> Iterable[str]:
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n" + _NO_NEWLINE
