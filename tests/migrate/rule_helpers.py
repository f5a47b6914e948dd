"""Running rules over one parsed cell on its own (no other cells, no prefix), for the tests of single rules."""

from __future__ import annotations

from typing import List, Sequence, Tuple, Type

import libcst

from air_migrate.cell_pass import CellOutcome, PreparedCell
from air_migrate.rule_base import Finding, Rule


def run_rules(rule_types: Sequence[Type[Rule]], module: libcst.Module, todo_comments: bool = False) -> CellOutcome:
    """Survey and run ``rule_types`` over ``module`` as the engine runs them over one cell."""
    cell = PreparedCell(module, rule_types)
    cell.survey()
    return cell.run(todo_comments)


def apply(rule_type: Type[Rule], module: libcst.Module) -> Tuple[libcst.Module, List[Finding]]:
    """Run one rule over a parsed cell; return the new module and what the rule reported."""
    outcome = run_rules([rule_type], module)
    return outcome.module, outcome.findings
