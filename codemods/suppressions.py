"""Suppression comments, as ruff users write them: on a line, ``# air-migrate: ignore[AM101]`` (several codes
comma-separated; a bare ``# air-migrate: ignore`` for every code) or ``# noqa: AM101``; anywhere in a file, on a
line of its own, ``# air-migrate: skip-file``.

A line suppression hides the records of the codes it names that start (or end) on its line (for a skipped cell,
``AM901``, on any line of the cell), of every severity but
``change`` and ``error``: an item for a person (``manual``, ``blocking``: the file is then no longer held back),
a ``review`` note, an ``info`` note. It never stops a rewrite, and a ``change`` is always reported: to keep a
file as it is, skip it. A suppression that suppresses nothing, or names a code that does not exist, is reported
itself (``AM904``, severity ``info``, as ruff's ``RUF100``). A bare ``# noqa`` (no codes) and the codes of
other tools in a ``# noqa:`` list belong to other linters: they are left alone.

Comments are found as Python's tokenizer finds them, so a string that holds ``# noqa: AM101`` suppresses nothing;
in lines the tokenizer does not see (magics, ``# MAGIC`` lines, cells that are not Python) any ``#`` counts.
"""

from __future__ import annotations

import dataclasses
import io
import re
import tokenize
from typing import AbstractSet, Collection, Dict, FrozenSet, Iterable, List, Optional, Set

from air_migrate.sources import Cell, SourceFile


_IGNORE = re.compile(r"#\s*air-migrate\s*:\s*ignore\b(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[,\s]+[A-Za-z]+[0-9]+)*)", re.IGNORECASE)
_SKIP_FILE = re.compile(r"^\s*#\s*air-migrate\s*:\s*skip-file\s*$", re.IGNORECASE)
_WORDS = re.compile(rb"air-migrate|noqa", re.IGNORECASE)
_OURS = "AM"
_CHANGES = " (a change is always made and reported; to leave a file as it is: `# air-migrate: skip-file`)"


@dataclasses.dataclass
class Suppression:
    """One suppression comment: where it is (1-based, in the cell) and the codes it names (``None``: every code)."""

    cell: int
    line: int
    column: int
    codes: Optional[FrozenSet[str]]
    text: str
    used: Set[str] = dataclasses.field(default_factory=set)
    """The codes it suppressed something of."""

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


def skips_file(data: bytes, source: SourceFile) -> bool:
    """Whether a code cell of the file holds a ``# air-migrate: skip-file`` line."""
    if b"skip-file" not in data:
        return False
    for cell in source.cells:
        if not cell.code:
            continue
        numbers = [number for number, line in enumerate(cell.raw.splitlines(), start=1) if _SKIP_FILE.match(line)]
        if not numbers:
            continue
        comments = _comment_starts(cell)
        text_lines = cell.text.splitlines() if cell.text is not None else []
        for number in numbers:
            seen = comments is not None and number <= len(text_lines)
            if not seen or (
                comments is not None and number in comments
            ):  # (a line of a string that reads so is not a comment)
                return True
    return False


def find(data: bytes, source: SourceFile) -> List[Suppression]:
    """Every line suppression in the file's code cells, in file order."""
    if not _WORDS.search(data):
        return []
    found: List[Suppression] = []
    for cell in source.cells:
        if cell.code:
            found.extend(_in_cell(cell))
    return found


def _in_cell(cell: Cell) -> List[Suppression]:
    candidates = [
        suppression
        for number, line in enumerate(cell.raw.splitlines(), start=1)
        if "#" in line
        for suppression in _on_line(cell.number, number, line)
    ]
    if not candidates:
        return []  # (the tokenizer runs only over a cell that has one: most files hold noqa comments of other linters)
    comments = _comment_starts(cell)
    if comments is None:
        return candidates
    text_lines = cell.text.splitlines() if cell.text is not None else []
    raw_lines = cell.raw.splitlines()
    kept = []
    for suppression in candidates:
        number = suppression.line
        # A line the tokenizer saw as it is written: the suppression must lie inside its comment.
        seen = number <= len(text_lines) and text_lines[number - 1] == raw_lines[number - 1]
        start = comments.get(number)
        if not seen or (start is not None and suppression.column - 1 >= start):
            kept.append(suppression)
    return kept


def _on_line(cell: int, number: int, line: str) -> Iterable[Suppression]:
    for match in _IGNORE.finditer(line):
        raw = match.group("codes")
        codes = None if raw is None else frozenset(_codes(raw))
        yield Suppression(cell, number, match.start() + 1, codes, match.group())
    for match in _NOQA.finditer(line):
        codes = frozenset(code for code in _codes(match.group("codes")) if code.startswith(_OURS))
        if codes:
            yield Suppression(cell, number, match.start() + 1, codes, match.group())


def _codes(text: str) -> List[str]:
    return [code.upper() for code in re.split(r"[,\s]+", text) if code]


def _comment_starts(cell: Cell) -> Optional[Dict[int, int]]:
    """Line -> 0-based column where its comment starts, for a cell whose Python tokenizes; ``None`` otherwise."""
    if cell.text is None:
        return None
    starts: Dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(cell.text).readline):
            if token.type == tokenize.COMMENT:
                starts[token.start[0]] = token.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return starts


def matches(suppressions: Iterable[Suppression], cell: int, lines: Collection[int], code: str) -> bool:
    """Whether a suppression on one of ``lines`` of ``cell`` covers ``code``; marks it used if so."""
    hit = False
    for suppression in suppressions:
        if suppression.cell == cell and suppression.line in lines and suppression.covers(code):
            suppression.used.add(code)
            hit = True
    return hit


def unused_messages(suppression: Suppression, known: AbstractSet[str], active: AbstractSet[str]) -> List[str]:
    """What to report of a suppression once every record was matched: unknown codes, and codes (of a selected
    rule) that it suppressed nothing of."""
    messages = []
    if suppression.codes is None:
        if not suppression.used:
            messages.append(f"`{suppression.text}` suppresses nothing on this line{_CHANGES}: remove it")
        return messages
    unknown = sorted(suppression.codes - known)
    if unknown:
        messages.append(
            f"`{suppression.text}` names unknown code(s) {', '.join(unknown)} (see air-migrate --list-rules)"
        )
    idle = sorted((suppression.codes & active) - suppression.used)
    if idle:
        messages.append(
            f"`{suppression.text}`: nothing of {', '.join(idle)} to suppress on this line{_CHANGES}: remove it"
        )
    return messages
