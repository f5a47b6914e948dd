"""Every code ``air-migrate`` can report, with one line of documentation each (what ``--list-rules`` prints),
and the choice of rules by code (``--select``/``--ignore``).

A rule documents its own code through its ``DESCRIPTION``; the codes a rule reports besides its own, and those the
driver reports (skipped cells, pip lines), are documented in :data:`EXTRA_CODES`, the one table of them.
"""

from __future__ import annotations

from typing import Dict, List, Tuple, Type

from air_migrate.rules import REGISTRY, Rule
from air_migrate.rules.am2xx_codes import DESCRIPTIONS as TORCH_DISTRIBUTOR_CODES

EXTRA_CODES: Dict[str, str] = {
    "AM104": "reported: an H100 type whose count is not a literal (the shape depends on it)",
    "AM105": "reported: a literal count with no accelerator type for its model (e.g. 4 x H100)",
    "AM106": "reported: a GPU type string that is not an old model name as written",
    "AM107": "reported: a computed GPU type string",
    "AM901": "reported: a notebook cell skipped (a non-Python cell magic, a multi-line magic)",
    "AM902": "reported: a notebook cell that does not parse is skipped (a bare shell or magic line such as "
             "`pip install`, or a syntax error, with the parser's message)",
    "AM903": "error: a plain script that does not parse (with the parser's message) is left as it is; exit code 3",
    **TORCH_DISTRIBUTOR_CODES,
}


def documented_codes() -> List[Tuple[str, str]]:
    """Every code with its description, in code order; a rule's own description wins over the table."""
    table = dict(EXTRA_CODES)
    table.update({code: rule.DESCRIPTION for code, rule in REGISTRY.items()})
    return sorted(table.items())


def select_rules(select: str, ignore: str) -> List[Type[Rule]]:
    """The rules ``--select``/``--ignore`` (comma-separated codes) leave, in code order."""
    chosen = [code.strip().upper() for code in select.split(",") if code.strip()] or sorted(REGISTRY)
    ignored = {code.strip().upper() for code in ignore.split(",") if code.strip()}
    unknown = sorted((set(chosen) | ignored) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown rule code(s): {', '.join(unknown)}; --select and --ignore take the rule codes "
                         f"{', '.join(sorted(REGISTRY))} (see --list-rules)")
    return [REGISTRY[code] for code in sorted(set(chosen)) if code not in ignored]
