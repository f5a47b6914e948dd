"""The codes the driver reports itself (:mod:`air_migrate.engine`), which no rule reports, with their one line for
``--list-rules``: cells it skips, files it cannot parse, suppression comments that suppress nothing."""

from __future__ import annotations

from typing import Dict

SKIPPED_CELL = "AM901"
UNPARSABLE_CELL = "AM902"
UNPARSABLE_SCRIPT = "AM903"
UNUSED_SUPPRESSION = "AM904"

DRIVER_CODES: Dict[str, str] = {
    SKIPPED_CELL: "reported: a notebook cell skipped (a non-Python cell magic, a multi-line magic)",
    UNPARSABLE_CELL: "reported: a notebook cell that does not parse is skipped (a bare shell or magic line such as "
    "`pip install`, or a syntax error, with the parser's message)",
    UNPARSABLE_SCRIPT: "error: a plain script that does not parse (with the parser's message) is left as it is; "
    "exit code 3",
    UNUSED_SUPPRESSION: "info: a suppression comment (# air-migrate: ignore[...], # noqa: AMxxx) that suppresses "
    "nothing on its line, or names an unknown code",
}
