"""Migrating one file: its cells through the selected rules, checked, and put back together.

The driver knows nothing of individual rules: it splits a file into cells (:mod:`air_migrate.sources`), skips
cells that cannot matter by a cheap text check, parses the rest with libcst, runs each rule in code order, checks
that the result still parses, and renders the file. By default a file with a blocking finding is left unchanged,
since half a migration breaks on both runtimes (``partial=True`` writes what could be converted).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import List, Optional, Sequence, Tuple, Type

import libcst

from air_migrate.results import FileResult, Record
from air_migrate.rules.base import Finding, Rule, apply
from air_migrate.sources import Cell, SourceError, SourceFile, read_source

# A cell none of these words appear in cannot hold anything a rule changes.
_MENTIONS = ("serverless_gpu", "serverless-gpu", "gpus", "gpu_type")


def mentions(text: str) -> bool:
    return any(word in text for word in _MENTIONS)


def migrate_file(
    path: str, data: bytes, rules: Sequence[Type[Rule]], partial: bool = False, *,
    fix_pip: bool = False, pip_package: Optional[str] = None, todo_comments: bool = False,
) -> FileResult:
    """Run ``rules`` over the file ``path`` whose bytes are ``data``.

    ``fix_pip``, ``pip_package`` and ``todo_comments`` are the command line's ``--fix-pip``, ``--pip-package`` and
    ``--todo-comments`` (accepted here; what they do is the rules' part).
    """
    result = FileResult(path, data)
    if not any(word.encode() in data for word in _MENTIONS):
        return result
    try:
        source = read_source(path, data)
    except SourceError as error:
        result.error = str(error)
        return result
    result.relevant = True
    new_texts = {}
    context = ""  # the import lines of earlier cells: names resolve across cells, in order
    for cell in source.cells:
        _report_pip_installs(result, source, cell)
        if cell.text is None:
            if cell.skip_reason:
                _record(result, source, cell.number, 1, 1, "AM901", f"cell skipped: {cell.skip_reason}", False)
            continue
        if not mentions(cell.text):
            context += _import_lines(cell.text)
            continue
        try:
            libcst.parse_module(cell.text)
        except libcst.ParserSyntaxError as error:
            _record(result, source, cell.number, error.raw_line, error.raw_column + 1, "AM902",
                    f"cell skipped: it is not valid Python here ({error.message})", False)
            continue
        new_text, findings = _run_rules(rules, context, cell.text)
        for finding in findings:
            _record(result, source, cell.number, finding.line, finding.column, finding.code, finding.message,
                    finding.attention, finding.blocking)
        context += _import_lines(new_text)
        if new_text != cell.text:
            try:
                libcst.parse_module(new_text)
                ast.parse(new_text)
            except (libcst.ParserSyntaxError, SyntaxError) as error:  # a rule's bug: never write it
                result.error = f"internal error: the migrated cell {cell.number} does not parse ({error})"
                return result
            new_texts[cell.number] = new_text
    if new_texts and (partial or not result.blocked):
        result.migrated = source.render(new_texts)
        result.cells = {n: (source.cells[n - 1].raw, source.cells[n - 1].unmask(t)) for n, t in new_texts.items()}
    return result


_PIP_INSTALL = re.compile(r"^\s*(?:# MAGIC\s*)?[%!]\s*pip\s+install\b.*\bserverless[-_]gpu\b", re.IGNORECASE)


def _report_pip_installs(result: FileResult, source: SourceFile, cell: Cell) -> None:
    """``%pip install serverless_gpu`` (as a magic or a ``# MAGIC`` line) is reported; rewriting it is opt-in."""
    if cell.raw and "gpu" in cell.raw:
        for index, line in enumerate(cell.raw.splitlines(), start=1):
            if _PIP_INSTALL.match(line):
                _record(result, source, cell.number, index, 1, "AM110",
                        "installs serverless_gpu: install databricks-air-oss instead (databricks-sdk-air on "
                        "Databricks); automatic rewriting of pip lines is not available yet", True)


def _run_rules(rules: Sequence[Type[Rule]], context: str, text: str) -> Tuple[str, List[Finding]]:
    """Run the rules over ``text`` as if ``context`` (earlier cells' imports) came first; return text and findings.

    Should a rule touch the context itself, the cell is run again without it (names from earlier cells are then
    not resolved, which only means fewer changes).
    """
    for prefix in (context, "") if context else ("",):
        module = libcst.parse_module(prefix + text)
        findings: List[Finding] = []
        for rule in rules:
            module, found = apply(rule, module)
            findings += found
        code = module.code
        if code.startswith(prefix):
            skip = prefix.count("\n")
            kept = [dataclasses.replace(f, line=f.line - skip) for f in findings if f.line > skip]
            return code[len(prefix):], kept
    raise AssertionError("an empty prefix always matches")


def _import_lines(text: str) -> str:
    """The module-level import statements of a cell, as source lines."""
    try:
        module = libcst.parse_module(text)
    except libcst.ParserSyntaxError:
        return ""
    lines = []
    for statement in module.body:
        if isinstance(statement, libcst.SimpleStatementLine) and all(
            isinstance(small, (libcst.Import, libcst.ImportFrom)) for small in statement.body
        ):
            line = module.code_for_node(statement.with_changes(leading_lines=()))
            lines.append(line if line.endswith("\n") else line + "\n")
    return "".join(lines)


def _record(
    result: FileResult, source: SourceFile, cell_number: int, line: int, column: int, code: str, message: str,
    attention: bool, blocking: bool = False,
) -> None:
    cell = source.cells[cell_number - 1]
    if source.kind == "python":
        where_cell, where_line = None, line
    elif source.kind == "databricks":
        where_cell, where_line = cell_number, cell.first_line + line - 1
    else:
        where_cell, where_line = cell_number, line
    result.records.append(
        Record(result.path, where_cell, where_line, column, code, message, attention or blocking, blocking)
    )
