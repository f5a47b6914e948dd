"""Running rules over one parsed cell on its own (no other cells, no prefix), for the tests of single rules; and
every rule over a whole file, for the tests of how they work together."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple, Type

import libcst

from air_migrate.cell_pass import CellOutcome, PreparedCell
from air_migrate.engine import migrate_file
from air_migrate.results import Record
from air_migrate.rule_base import Finding, Rule
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


def migrate_text(source: str, path: str = "job.py", **options: Any) -> Tuple[str, List[str]]:
    """Every rule over a whole file, as the command runs them: the file after migration (as it was when unchanged
    or held back) and its report lines, in report order."""
    result = migrate_file(path, source.encode(), [REGISTRY[code] for code in sorted(REGISTRY)], **options)
    assert result.error is None, result.error
    records = sorted(result.records, key=Record.sort_key)
    return (result.migrated or result.original).decode(), [str(record) for record in records]


def person_items(report: List[str]) -> List[str]:
    """The report lines that need a person (``manual`` or ``blocking``), without their position."""
    return [line.split(": ", 1)[1] for line in report if " manual " in line or " blocking " in line]
