"""Migrating one file: its cells through the selected rules, checked, and put back together.

The driver knows nothing of individual rules. For one file it:

1. skips it unless its bytes mention a trigger word (:func:`air_migrate.cell_context.mentions_any`);
2. splits it into cells (:mod:`air_migrate.sources`) and lets the line rules look at the raw lines of each code cell
   (``%pip``, ``%run``, ``# MAGIC`` lines);
3. lets each rule scan the whole file first (:meth:`~air_migrate.rule_base.Rule.scan_file`: a rewrite that spans
   cells asks for the cells it needs), then parses each Python cell that mentions a trigger word or that a rule
   asked for, with the imports of the earlier cells before it so that names resolve across cells in order
   (:mod:`air_migrate.cell_context`); a notebook cell that does not parse is reported and skipped while the
   others are migrated, and a plain script that does not parse is a file that failed
   (:mod:`air_migrate.syntax_errors` says why, in Python's words);
4. lets every rule survey every parsed cell, then runs all rules over each cell in one traversal, so positions are
   those of the input (:mod:`air_migrate.cell_pass`);
5. checks that every changed cell still parses (Python's own parser, :mod:`ast`) and renders the file.

By default a file with a blocking finding keeps its code as it is, since half a migration breaks on both runtimes
(``partial=True`` writes what could be converted). ``todo_comments=True`` puts a ``# TODO(air-migrate AMxxx): ...``
line above each statement that needs a person; those markers are written even into a file whose changes are held
back: they change no behaviour, and they show the person where the blockers are. ``fix_pip=True`` rewrites the
``%pip install serverless_gpu`` lines (``pip_package`` names the package to install instead).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Callable, Dict, List, Optional, Sequence, Set, Type

import libcst

from air_migrate.cell_context import ImportContext, mentions, mentions_any
from air_migrate import suppressions
from air_migrate.driver_codes import DRIVER_CODES, SKIPPED_CELL, UNUSED_SUPPRESSION
from air_migrate.results import FileResult, Record
from air_migrate.rule_base import REGISTRY, AnyRule, CellContext, FileOptions, Finding, LineRule, Rule, Severity
from air_migrate.cell_pass import CellOutcome, PreparedCell, prepare_cell
from air_migrate.sources import Cell, SourceError, SourceFile, read_source
from air_migrate.suppressions import Suppression
from air_migrate.syntax_errors import SyntaxProblem, describe, looks_like_shell
from air_migrate.todo_markers import LEFT_NOTE, PREFIX_BYTES, left_markers

__all__ = ["FileResult", "Record", "migrate_file", "mentions"]


@dataclasses.dataclass
class _ParsedCell:
    cell: Cell
    prepared: PreparedCell
    outcome: Optional[CellOutcome] = None


def migrate_file(
    path: str,
    data: bytes,
    rules: Sequence[AnyRule],
    partial: bool = False,
    *,
    fix_pip: bool = False,
    pip_package: Optional[str] = None,
    todo_comments: bool = False,
) -> FileResult:
    """Run ``rules`` over the file ``path`` whose bytes are ``data``."""
    result = FileResult(path, data)
    if not mentions_any(data):
        return result
    result.relevant = True  # (also when it cannot be read: it does mention the old API)
    try:
        source = read_source(path, data)
    except SourceError as error:
        result.error = str(error)
        return result
    if suppressions.skips_file(data, source):
        result.relevant = False
        return result  # `# air-migrate: skip-file`: as if it held nothing to migrate
    result.encoding = source.encoding
    found_suppressions = suppressions.find(data, source)
    options = FileOptions(source.kind, fix_pip, pip_package)
    line_rules = [rule(options) for rule in rules if issubclass(rule, LineRule)]
    rule_types = [rule for rule in rules if issubclass(rule, Rule)]
    parsed = _parse_cells(result, source, rule_types)
    if result.error is not None:  # nothing else about a file that could not be read as Python
        result.records = [record for record in result.records if record.severity is Severity.ERROR]
        return result
    line_fixes = _check_lines(result, source, line_rules)
    for unit in parsed:
        unit.prepared.survey()
    for unit in parsed:
        unit.outcome = unit.prepared.run(todo_comments, _suppressed_in(found_suppressions, unit))
        _record_findings(result, source, unit)
    if PREFIX_BYTES in data:
        _report_left_markers(result, source, rules)
    if found_suppressions:
        _apply_suppressions(result, source, found_suppressions, rules)
    apply_changes = partial or not result.blocked
    changes = apply_changes and any(record.severity.rewritten for record in result.records)
    new_texts: Dict[int, str] = {}
    for unit in parsed:
        text = _new_text(unit, apply_changes, todo_comments, changes)
        if text is None:
            return _internal_error(result, unit.cell.number)
        if text != unit.cell.text:
            new_texts[unit.cell.number] = unit.cell.unmask(text)
    if apply_changes:
        for number in line_fixes:
            cell = source.cells[number - 1]
            new_texts[number] = _fix_lines(new_texts.get(number, cell.raw), line_rules, shell=cell.shell)
    changed = {n: text for n, text in new_texts.items() if text != source.cells[n - 1].raw}
    if changed:
        try:
            result.migrated = source.render(changed)
        except SourceError as error:
            result.error = str(error)
            return result
        result.cells = {n: (source.cells[n - 1].raw, text) for n, text in sorted(changed.items())}
    return result


def _parse_cells(result: FileResult, source: SourceFile, rule_types: Sequence[Type[Rule]]) -> List[_ParsedCell]:
    """Every Python cell worth parsing, parsed with the earlier cells' imports before it."""
    context = ImportContext()
    scratch: Dict[str, object] = {}  # one per file: nothing a rule learns leaks into another file
    unparsed: List[str] = []
    parsed: List[_ParsedCell] = []
    wanted, scanned = _scan_file(result, source, rule_types, scratch)
    last = max((cell.number for cell in source.cells if cell.code and cell.text is not None), default=0)
    for cell in source.cells:
        if not cell.code:
            continue
        if cell.text is None:
            unparsed.append(cell.raw)
            if cell.skip_reason and cell.number not in scanned and context.mentions(cell.raw):
                _record(
                    result, source, cell, "AM901", f"cell skipped: {cell.skip_reason}", 1, 1, severity=Severity.MANUAL
                )
            continue
        unparsed.extend(cell.masks.values())
        if cell.number not in wanted and not context.mentions(cell.text):
            if cell.number != last:
                context.add(cell.number, cell.text)
            continue
        newline = _newline(cell.text)
        prefix = context.imports(newline)
        template = CellContext(cell.number, file=scratch, kind=source.kind, unparsed=unparsed)
        try:
            prepared = prepare_cell(cell.text, prefix, rule_types, template, newline)
        except libcst.ParserSyntaxError as error:
            unparsed.append(cell.raw)
            prefix_lines = sum(found.text.count("\n") for found in prefix)
            _report_unparsable(result, source, cell, describe(cell.text, error, prefix_lines))
            if result.error is not None:
                return []
            continue
        parsed.append(_ParsedCell(cell, prepared))
        if cell.number != last:  # a later cell may use its imports
            context.add(cell.number, cell.text)
    return parsed


def _report_unparsable(result: FileResult, source: SourceFile, cell: Cell, problem: SyntaxProblem) -> None:
    """A plain script that does not parse cannot be processed at all (it has no cells, no magics): the file fails.
    A notebook cell that does not parse is skipped, the others are migrated: a bare magic or shell line is said to
    be one, anything else gets the parser's own message."""
    message = cell.unmask(problem.message)
    if source.kind == "python":
        result.error = f"cannot parse: {message}"
        _record(result, source, cell, "AM903", result.error, problem.line, problem.column, severity=Severity.ERROR)
        return
    lines = cell.text.splitlines() if cell.text is not None else []
    line = lines[problem.line - 1] if problem.line <= len(lines) else ""
    if looks_like_shell(line):
        _record(
            result,
            source,
            cell,
            "AM902",
            "cell skipped: it is not valid Python (a bare shell or magic line such "
            "as `%cd` or `pip install`?), so nothing in it is migrated: check it by hand",
            problem.line,
            len(line) - len(line.lstrip()) + 1,
            severity=Severity.MANUAL,
        )  # where the command starts
    else:
        _record(
            result,
            source,
            cell,
            "AM902",
            f"cell skipped: cannot parse: {message}; nothing in it is migrated: fix the cell and run air-migrate again",
            problem.line,
            problem.column,
            severity=Severity.MANUAL,
        )


def _scan_file(
    result: FileResult, source: SourceFile, rule_types: Sequence[Type[Rule]], scratch: Dict[str, object]
) -> "tuple[Set[int], Set[int]]":
    """Let each rule look at the whole file first (:meth:`Rule.scan_file`); record what they found in cells no rule
    parses. Returns the cells the rules want parsed whatever words they hold, and the cells of those findings."""
    wanted: Set[int] = set()
    scanned: Set[int] = set()
    for rule in rule_types:
        scan = rule.scan_file(source)
        if scan is None:
            continue
        wanted |= scan.parse
        scratch.update(scan.scratch)
        for number, found in scan.findings:
            _record(
                result,
                source,
                source.cells[number - 1],
                found.code,
                found.message,
                found.line,
                found.column,
                severity=found.severity,
            )
            scanned.add(number)
    return wanted, scanned


def _check_lines(result: FileResult, source: SourceFile, line_rules: Sequence[LineRule]) -> List[int]:
    """Report what the line rules find in every code cell; return the cells with a line to rewrite."""
    fixes: List[int] = []
    if not line_rules:
        return fixes
    for cell in source.cells:
        if not cell.code:
            continue
        hits = [
            (index, line, rule, found)
            for index, line in enumerate(cell.raw.splitlines(), start=1)
            for rule in line_rules
            for found in [rule.check(line, shell=cell.shell)]
            if found is not None
        ]
        if not hits or _magic_lines_are_text(source, cell):
            continue
        for index, line, rule, found in hits:
            _record(
                result,
                source,
                cell,
                rule.CODE,
                found.message,
                index,
                found.column,
                severity=found.severity,
                end=(index, found.end_column),
                before=line,
                after=found.new_line,
            )
        if any(found.new_line is not None for *_, found in hits):
            fixes.append(cell.number)
    return fixes


def _magic_lines_are_text(source: SourceFile, cell: Cell) -> bool:
    """In a script or a Databricks Python cell that parses, a line that looks like a magic (or a ``# MAGIC`` line)
    is inside a string or a comment: only a cell that does not parse can hold a bare magic line (a cell whose
    magics were masked so that it parses holds real ones)."""
    if source.kind == "ipynb" or cell.text is None or cell.masks:
        return False
    try:
        ast.parse(cell.text)
    except (SyntaxError, ValueError):
        return False
    return True


def _fix_lines(text: str, line_rules: Sequence[LineRule], shell: bool = False) -> str:
    """``text`` with every line a line rule rewrites rewritten, line endings kept."""
    lines = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        for rule in line_rules:
            found = rule.check(body, shell=shell)
            if found is not None and found.new_line is not None:
                body = found.new_line
        lines.append(body + line[len(line.rstrip("\r\n")) :])
    return "".join(lines)


def _new_text(unit: _ParsedCell, apply_changes: bool, todo_comments: bool, changes: bool = False) -> Optional[str]:
    """The cell's new (masked) Python text; ``None`` when it does not parse (a rule's bug: never write it).
    ``changes``: the file is written with changes, which take away the reason of its lasting items (they are
    marked then)."""
    assert unit.outcome is not None
    changed = True
    if apply_changes:
        lasting = changes and bool(unit.outcome.lasting)
        module = unit.prepared.mark_lasting(unit.outcome) if lasting else unit.outcome.module
        changed = unit.outcome.changed or lasting
    elif todo_comments and unit.outcome.marks:
        module = unit.prepared.markers_only(unit.outcome.marks)
    else:
        return unit.cell.text
    return unit.prepared.new_text(module, unit.cell.text or "", changed)


def _internal_error(result: FileResult, cell: int) -> FileResult:
    result.error = f"internal error: the migrated cell {cell} would not parse, so the file is left as it is"
    result.migrated = None
    result.cells = {}
    return result


def _record_findings(result: FileResult, source: SourceFile, unit: _ParsedCell) -> None:
    assert unit.outcome is not None
    skip = unit.prepared.context.prefix_lines
    cell = unit.cell
    for finding in unit.outcome.findings:
        end = (finding.end_line - skip, finding.end_column) if finding.end_line is not None else None
        _record(
            result,
            source,
            cell,
            finding.code,
            finding.message,
            finding.line - skip,
            finding.column,
            severity=finding.severity,
            end=end,
            before=cell.unmask(finding.before) if finding.before is not None else None,
            after=cell.unmask(finding.after) if finding.after is not None else None,
        )


def _record(
    result: FileResult,
    source: SourceFile,
    cell: Cell,
    code: str,
    message: str,
    line: int,
    column: int,
    *,
    severity: Severity = Severity.CHANGE,
    end: Optional[tuple] = None,
    before: Optional[str] = None,
    after: Optional[str] = None,
) -> None:
    """Add a record at a 1-based line of the cell, numbered as the report numbers it for this kind of file."""
    if source.kind == "ipynb":
        where_cell, offset = cell.number, 0
    elif source.kind == "databricks":
        where_cell, offset = cell.number, cell.first_line - 1
    else:
        where_cell, offset = None, 0
    end_line, end_column = end if end is not None else (None, None)
    result.records.append(
        Record(
            path=result.path,
            cell=where_cell,
            line=line + offset,
            column=column,
            code=code,
            message=message,
            severity=severity,
            end_line=end_line + offset if end_line is not None else None,
            end_column=end_column,
            before=before,
            after=after,
        )
    )


def _report_left_markers(result: FileResult, source: SourceFile, rules: Sequence[AnyRule]) -> None:
    """Report each ``# TODO(air-migrate AMxxx)`` marker an earlier run left whose item this run does not report in
    the statement below it (the rewrite took away what it was found on, or a person changed the code but left the
    marker): the item stays reported, at that statement, until the marker is deleted or the item suppressed."""
    active = {code for rule in rules for code in (rule.CODE, *rule.REPORTS)}
    for cell in source.cells:
        if not cell.code or cell.text is None:
            continue
        offset = cell.first_line - 1 if source.kind == "databricks" else 0
        for marker in left_markers(cell.text):
            if marker.code not in active:
                continue
            first, last = (line + offset for line in marker.statement)
            live = any(
                record.code == marker.code
                and record.severity.needs_person
                and first <= record.line <= last
                and record.cell == (cell.number if source.kind != "python" else None)
                for record in result.records
            )
            if not live:
                _record(
                    result,
                    source,
                    cell,
                    marker.code,
                    cell.unmask(marker.message) + LEFT_NOTE,
                    marker.statement[0],
                    marker.column,
                    severity=Severity.MANUAL,
                )


def _suppressed_in(found: Sequence[Suppression], unit: _ParsedCell) -> Optional[Callable[[Finding], bool]]:
    """Whether a suppression comment hides a finding of the cell (it then gets no TODO marker)."""
    if not found:
        return None
    skip, number = unit.prepared.context.prefix_lines, unit.cell.number

    def suppressed(finding: Finding) -> bool:
        lines = (finding.line - skip, (finding.end_line or finding.line) - skip)
        return suppressions.matches(found, number, lines, finding.code)

    return suppressed


def _apply_suppressions(
    result: FileResult, source: SourceFile, found: Sequence[Suppression], rules: Sequence[AnyRule]
) -> None:
    """Drop the records a suppression comment hides (never a change, never an error), then report each
    suppression that suppressed nothing, or names an unknown code (``AM904``, a note)."""
    kept = []
    for record in result.records:
        if record.severity not in (Severity.CHANGE, Severity.ERROR):
            cell = record.cell or 1
            offset = source.cells[cell - 1].first_line - 1 if source.kind == "databricks" else 0
            lines: Sequence[int] = (record.line - offset, (record.end_line or record.line) - offset)
            if record.code == SKIPPED_CELL:  # about the whole cell: a comment on any of its lines (a shell comment)
                lines = range(1, len(source.cells[cell - 1].raw.splitlines()) + 1)
            if suppressions.matches(found, cell, lines, record.code):
                continue
        kept.append(record)
    result.records = kept
    active = set(DRIVER_CODES)
    for rule in rules:
        active.update((rule.CODE, *rule.REPORTS))
    known = set(DRIVER_CODES)
    for rule in REGISTRY.values():
        known.update((rule.CODE, *rule.REPORTS))
    for suppression in found:
        for message in suppressions.unused_messages(suppression, known, active):
            _record(
                result,
                source,
                source.cells[suppression.cell - 1],
                UNUSED_SUPPRESSION,
                message,
                suppression.line,
                suppression.column,
                severity=Severity.INFO,
            )


def _newline(text: str) -> str:
    found = re.search(r"\r\n|\n", text)
    return found.group() if found else "\n"
