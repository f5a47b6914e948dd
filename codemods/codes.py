"""Every code ``air-migrate`` can report, with one line of documentation each (what ``--list-rules`` prints),
and the choice of rules by code (``--select``/``--ignore``).

A rule documents its own code through its ``DESCRIPTION`` and the other codes it reports through its ``REPORTS``
(:mod:`air_migrate.rule_base`); the codes the driver reports itself (cells it skips, files it cannot parse,
suppressions that suppress nothing) are documented in :data:`EXTRA_CODES`. Importing this module registers every
rule (:mod:`air_migrate.rules`).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

from air_migrate.driver_codes import DRIVER_CODES
from air_migrate.rule_base import AnyRule
from air_migrate.rules import REGISTRY

EXTRA_CODES: Dict[str, str] = DRIVER_CODES
"""The codes of the driver (:mod:`air_migrate.engine`), which no rule reports."""


def documented_codes() -> List[Tuple[str, str]]:
    """Every code with its description, in code order."""
    table = dict(EXTRA_CODES)
    for code, rule in REGISTRY.items():
        table.update(rule.REPORTS)
        table[code] = rule.DESCRIPTION
    return sorted(table.items())


def select_rules(select: str, ignore: str) -> List[AnyRule]:
    """The rules ``--select``/``--ignore`` (comma-separated codes) leave, in code order."""
    chosen = [code.strip().upper() for code in select.split(",") if code.strip()] or sorted(REGISTRY)
    ignored = {code.strip().upper() for code in ignore.split(",") if code.strip()}
    unknown = sorted((set(chosen) | ignored) - set(REGISTRY))
    if unknown:
        raise ValueError(
            f"unknown rule code(s): {', '.join(unknown)}; --select and --ignore take the rule codes "
            f"{', '.join(sorted(REGISTRY))} (see --list-rules)"
        )
    return [REGISTRY[code] for code in sorted(set(chosen)) if code not in ignored]
