"""``# TODO(air-migrate AMxxx): ...`` comments above the statements that need a person.

A marker is one comment line in the statement's own indentation, just above it (above its decorators, for a
decorated definition). A statement that already carries a marker of a code gets no second one of that code, so a
second run adds nothing. Markers go only into Python cells: never into ``# MAGIC`` cells, never above a Databricks
notebook's header line (which belongs to no cell), never above a script's shebang or encoding line (libcst keeps
those in the module header, before the first statement's own lines).

``--todo-comments`` puts one above every statement that holds an item for a person. Without it, a write still puts
one above each such statement that it changes: the rewrite may take away what the item was found on (``gpu_type=X``
becomes ``accelerator_type=X``, and ``X`` may still hold ``"H100"``), and the marker is what keeps the item
reported. A run reports every marker it finds whose item it does not find again in the statement below it
(:func:`left_markers`), with the marker's code and message, so ``--check`` fails until a person resolves the item
and deletes the marker, or suppresses the item on that statement's line (``# air-migrate: ignore[AMxxx]``).
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst

from air_migrate.rule_base import STATEMENTS, Finding

PREFIX = "# TODO(air-migrate "
PREFIX_BYTES = PREFIX[2:].encode()
"""What the bytes of a file that holds a marker hold (the pre-filter looks for it)."""
LEFT_NOTE = " (said by the # TODO(air-migrate) line above it: delete that line once this is done)"
"""How the report says that an item comes from a marker an earlier run left."""
_MARKER = re.compile(r"#\s*TODO\(air-migrate (?P<code>AM\d+)\):\s*(?P<message>.*?)\s*$")


def marker_text(finding: Finding) -> str:
    """The comment for one finding: its code and its message on one line."""
    message = " ".join(finding.message.split())
    return f"{PREFIX}{finding.code}): {message}"


def marked_codes(lines: Sequence[libcst.EmptyLine]) -> Set[str]:
    """The codes of the markers already among ``lines``."""
    codes = set()
    for line in lines:
        if line.comment is not None and line.comment.value.startswith(PREFIX):
            codes.add(line.comment.value[len(PREFIX) :].split(")", 1)[0])
    return codes


def add_markers(
    statement: libcst.BaseStatement,
    findings: Sequence[Finding],
    header: Sequence[libcst.EmptyLine] = (),
    newline: str = "",
) -> libcst.BaseStatement:
    """``statement`` with one marker per finding above it, except for codes already marked there.

    ``header`` is the module's header when ``statement`` is the first one (libcst keeps the comments above a
    module's first statement there). ``newline`` is the cell's line ending, when it differs from the module's.
    """
    if not isinstance(statement, STATEMENTS):
        return statement
    done = marked_codes(list(header) + list(statement.leading_lines))
    new_lines: List[libcst.EmptyLine] = []
    seen: Set[str] = set()
    for finding in findings:
        text = marker_text(finding)
        if finding.code in done or text in seen:
            continue
        seen.add(text)
        new_lines.append(libcst.EmptyLine(comment=libcst.Comment(text), newline=libcst.Newline(newline or None)))
    if not new_lines:
        return statement
    return statement.with_changes(leading_lines=[*statement.leading_lines, *new_lines])


class MarkerInserter(libcst.CSTTransformer):
    """Adds markers above given statements of an unchanged cell (a file left as it is still gets its markers)."""

    def __init__(self, marks: Dict[libcst.CSTNode, List[Finding]], newline: str = "") -> None:
        super().__init__()
        self._marks = marks
        self._newline = newline
        self._header: Sequence[libcst.EmptyLine] = ()
        self._first: object = None

    def visit_Module(self, node: libcst.Module) -> None:
        self._header = node.header
        self._first = node.body[0] if node.body else None

    def on_leave(self, original_node, updated_node):
        findings = self._marks.get(original_node)
        if findings:
            header = self._header if original_node is self._first else ()
            return add_markers(updated_node, findings, header, self._newline)
        return updated_node


@dataclasses.dataclass(frozen=True)
class LeftMarker:
    """A marker found in a cell's text, and the statement below it."""

    line: int
    """1-based line of the marker in the cell."""
    code: str
    message: str
    statement: Tuple[int, int]
    """The first and last line (1-based, in the cell) of the statement the marker is above."""
    column: int
    """1-based column where that statement starts."""


def left_markers(text: str) -> List[LeftMarker]:
    """The markers of a cell's Python ``text`` (comments only, as the tokenizer finds them; a string that reads so
    is no marker), each with the statement it is above. A cell that does not tokenize has none."""
    if PREFIX not in text:
        return []
    lines = text.splitlines()
    comments: List[Tuple[int, str]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.string.startswith(PREFIX):
                comments.append((token.start[0], token.string))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    if not comments:
        return []
    spans = _statement_spans(text)
    found = []
    for line, comment in comments:
        match = _MARKER.match(comment)
        if match is None:
            continue
        first = next(
            (
                number
                for number in range(line + 1, len(lines) + 1)
                if lines[number - 1].strip() and not lines[number - 1].lstrip().startswith("#")
            ),
            None,
        )
        if first is None:
            continue  # a marker above nothing
        last = spans.get(first, first) if spans is not None else first
        column = len(lines[first - 1]) - len(lines[first - 1].lstrip()) + 1
        found.append(LeftMarker(line, match.group("code"), match.group("message"), (first, last), column))
    return found


def _statement_spans(text: str) -> Optional[Dict[int, int]]:
    """First line -> last line of the outermost statement that starts on each line (decorators included)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    spans: Dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            decorators = getattr(node, "decorator_list", ())
            first = min([node.lineno, *(decorator.lineno for decorator in decorators)])
            last = node.end_lineno or node.lineno
            spans[first] = max(spans.get(first, first), last)
    return spans
