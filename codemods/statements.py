"""A cell's Python text split into its top-level statements, by a lexical scan instead of a parse.

Parsing costs far more than reading: libcst builds one Python object per token (a 3 MB script takes minutes and
gigabytes), while the rules act on the few statements that name what they look for. So a cell is first cut into
top-level statements here, and only the statements that matter are parsed (:mod:`air_migrate.partial_parse`).

A chunk is one top-level statement with the lines libcst gives it: the blank and comment lines above it that are
not indented as far as its block, its decorators, and, when its last clause ends in an indented block, the lines
after it up to the last comment indented as far as that block (libcst's ``IndentedBlock.footer``); the last chunk
also holds the lines after the last statement. The chunks put together are the text, character for character.

The scan follows what decides where a statement ends: strings (also triple-quoted ones over several lines),
comments, brackets and backslash continuations. It gives up (``None``) on what it cannot follow, such as an
unterminated string or unbalanced brackets; the caller then parses the whole text, which reports the error.
"""

from __future__ import annotations

import re
from typing import List, Optional

# What matters for where a logical line ends, in the order Python's tokenizer tries it: a triple-quoted string
# before a one-line string (a prefix such as r or f does not change where a string ends), then comments, brackets,
# continuations and line ends. Everything else (names, numbers, operators) is skipped by the search.
_TOKEN = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""'
    r"|'''(?:[^'\\]|\\.|'(?!''))*'''"
    r'|"(?:[^"\\\r\n]|\\(?:\r\n|.))*"'
    r"|'(?:[^'\\\r\n]|\\(?:\r\n|.))*'"
    r"|(?P<quote>[\"'])"  # a quote that opens no complete string: unterminated
    r"|#[^\r\n]*"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])"
    r"|(?P<continuation>\\(?:\r\n|\r|\n))"
    r"|(?P<newline>\r\n|\r|\n)",
    re.DOTALL,
)
_CLAUSES = ("else", "elif", "except", "finally")
_DEFINITIONS = ("def", "class", "async")
_WORD = re.compile(r"[A-Za-z_]\w*")


def split_statements(text: str) -> Optional[List[str]]:
    """The top-level statements of ``text`` as chunks (see the module docstring), or ``None`` when the scan cannot
    follow the text or it holds no statement."""
    starts = _logical_line_starts(text)
    if starts is None:
        return None
    chunks: List[str] = []
    current: Optional[int] = None  # where the chunk of the statement being read starts
    block: Optional[str] = None  # the indentation of the block its last clause ends in, if it does
    decorators = False  # it is decorators so far, waiting for their def or class
    pending: List[int] = []  # blank and comment lines after its last line of code
    owned = -1  # index in pending of the last comment line indented as far as that block (the block owns it)
    for start in starts:
        kind = _line_kind(text, start)
        if kind in ("blank", "comment", "indented comment"):
            if kind == "indented comment" and block is not None and _indentation(text, start).startswith(block):
                owned = len(pending)
            pending.append(start)
            continue
        word = _WORD.match(text, start)
        first = word.group() if word is not None else ""
        if kind == "indented code":
            if current is None:
                return None  # an indented first statement is not valid Python: let the parser say so
            block = block if block is not None else _indentation(text, start)
        elif current is not None and (
            first in _CLAUSES or (decorators and (first in _DEFINITIONS or text.startswith("@", start)))
        ):
            decorators = decorators and first not in _DEFINITIONS
            block = None  # a new clause: only its own block can own what follows
        else:  # a new top-level statement
            if current is None:
                current = 0  # the text's first lines belong to its first statement
            else:
                split = _end_of_chunk(pending, owned, start)
                chunks.append(text[current:split])
                current = split
            decorators = text.startswith("@", start)
            block = None
        pending = []
        owned = -1
    if current is None:
        return None
    chunks.append(text[current:])
    return chunks


def _end_of_chunk(pending: List[int], owned: int, start: int) -> int:
    """Where a statement's chunk ends, given the blank and comment lines between it and the next statement (at
    ``start``): its block owns the lines up to the last one it owns (``owned``, an index in ``pending``); the next
    statement owns the rest."""
    rest = pending[owned + 1 :]
    return rest[0] if rest else start


def _indentation(text: str, start: int) -> str:
    position = start
    while position < len(text) and text[position] in " \t\f":
        position += 1
    return text[start:position]


def _logical_line_starts(text: str) -> Optional[List[int]]:
    """Offsets where a logical line starts (outside brackets, strings and continuations), the text's start first."""
    starts = [0]
    depth = 0
    for match in _TOKEN.finditer(text):
        group = match.lastgroup
        if group is None or group == "continuation":
            continue
        if group == "newline":
            if depth == 0:
                starts.append(match.end())
        elif group == "open":
            depth += 1
        elif group == "close":
            depth -= 1
            if depth < 0:
                return None
        elif group == "quote":
            return None
    if depth != 0:
        return None
    if starts[-1] == len(text):
        starts.pop()
    return starts


def _line_kind(text: str, start: int) -> str:
    end = len(text)
    position = start
    while position < end and text[position] in " \t\f":
        position += 1
    if position == end or text[position] in "\r\n":
        return "blank"
    if text[position] == "#":
        return "comment" if position == start else "indented comment"
    return "code" if position == start else "indented code"
