"""``# TODO(air-migrate AMxxx): ...`` comments above the statements that need a person (``--todo-comments``).

A marker is one comment line in the statement's own indentation, just above it (above its decorators, for a
decorated definition). A statement that already carries a marker of a code gets no second one of that code, so a
second run adds nothing. Markers go only into Python cells: never into ``# MAGIC`` cells, never above a Databricks
notebook's header line (which belongs to no cell), never above a script's shebang or encoding line (libcst keeps
those in the module header, before the first statement's own lines).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Set

import libcst

from air_migrate.rule_base import STATEMENTS, Finding

PREFIX = "# TODO(air-migrate "


def marker_text(finding: Finding) -> str:
    """The comment for one finding: its code and its message on one line."""
    message = " ".join(finding.message.split())
    return f"{PREFIX}{finding.code}): {message}"


def marked_codes(lines: Sequence[libcst.EmptyLine]) -> Set[str]:
    """The codes of the markers already among ``lines``."""
    codes = set()
    for line in lines:
        if line.comment is not None and line.comment.value.startswith(PREFIX):
            codes.add(line.comment.value[len(PREFIX):].split(")", 1)[0])
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
        new_lines.append(
            libcst.EmptyLine(comment=libcst.Comment(text), newline=libcst.Newline(newline or None))
        )
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

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
        findings = self._marks.get(original_node)
        if findings:
            header = self._header if original_node is self._first else ()
            return add_markers(updated_node, findings, header, self._newline)
        return updated_node
