"""What the rule tests share, checked as django-upgrade's fixer tests check theirs: :func:`check_transformed` (the
text becomes the expected text) and :func:`check_noop` (it stays as it is), each returning the report lines; a rule's
own tests name its codes (only those rules run, over the text as one cell on its own: no other cells, no prefix),
the others run every rule over a whole file as the command does."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Type

import libcst

from air_migrate.cell_pass import CellOutcome, PreparedCell
from air_migrate.engine import migrate_file
from air_migrate.results import FileResult, Record
from air_migrate.rule_base import AnyRule, Finding, Rule
from air_migrate.rules import REGISTRY


def run_rules(rule_types: Sequence[Type[Rule]], module: libcst.Module, todo_comments: bool = False) -> CellOutcome:
    """Survey and run ``rule_types`` over ``module`` as the engine runs them over one cell."""
    cell = PreparedCell(module, rule_types)
    cell.survey()
    return cell.run(todo_comments)


def apply(rule_type: Type[Rule], module: libcst.Module) -> Tuple[libcst.Module, List[Finding]]:
    """Run one rule over a parsed cell; return the new module and what the rule reported."""
    outcome = run_rules([rule_type], module)
    return outcome.module, outcome.findings


def migrate_result(
    source: str, path: str = "job.py", rules: Optional[Sequence[AnyRule]] = None, **options: Any
) -> FileResult:
    """``rules`` (every rule when ``None``) over a whole file, as the command runs them, its records in report order;
    ``options`` are :func:`~air_migrate.engine.migrate_file`'s (``partial``, ``fix_pip``, ``todo_comments``...)."""
    chosen = [REGISTRY[code] for code in sorted(REGISTRY)] if rules is None else rules
    result = migrate_file(path, source.encode(), chosen, **options)
    result.records.sort(key=Record.sort_key)
    return result


def migrate_text(
    source: str, path: str = "job.py", rules: Optional[Sequence[AnyRule]] = None, **options: Any
) -> Tuple[str, List[str]]:
    """The file after :func:`migrate_result` (as it was when unchanged or held back) and its report lines."""
    result = migrate_result(source, path, rules, **options)
    assert result.error is None, result.error
    return (result.migrated or result.original).decode(), [str(record) for record in result.records]


def check_transformed(
    source: str, expected: str, codes: Sequence[str] = (), path: str = "job.py", **options: Any
) -> List[str]:
    """Migrating ``source`` gives ``expected`` (see :func:`report_of` for ``codes``, ``path`` and ``options``);
    returns the report lines."""
    assert source != expected, "nothing to transform: use check_noop"
    migrated, report = report_of(source, codes, path, **options)
    assert migrated == expected
    return report


def check_noop(source: str, codes: Sequence[str] = (), path: str = "job.py", **options: Any) -> List[str]:
    """Migrating ``source`` leaves it as it is (see :func:`report_of` for ``codes``, ``path`` and ``options``);
    returns the report lines (what was found but not changed)."""
    migrated, report = report_of(source, codes, path, **options)
    assert migrated == source
    return report


def report_of(source: str, codes: Sequence[str] = (), path: str = "job.py", **options: Any) -> Tuple[str, List[str]]:
    """The text after migration and the report lines. With ``codes``, only those rules, over ``source`` as one cell
    on its own (a rule's own tests; the lines in the order the rules found them); without, every rule over the file
    ``path``, as the command runs them (:func:`migrate_text`, with ``options``)."""
    if not codes:
        return migrate_text(source, path, **options)
    assert not options, "options apply to a whole file: name no codes"
    outcome = run_rules([REGISTRY[code] for code in codes], libcst.parse_module(source))
    return outcome.module.code, [
        f"{path}:{f.line}:{f.column}: {f.code} {f.severity.value} {f.message}" for f in outcome.findings
    ]


def items(report: List[str]) -> List[str]:
    """The report lines without their position: ``AMxxx <severity> <message>``."""
    return [line.split(": ", 1)[1] for line in report]


def person_items(report: List[str]) -> List[str]:
    """The report lines that need a person (``manual`` or ``blocking``), without their position."""
    return [item for item in items(report) if " manual " in item or " blocking " in item]
