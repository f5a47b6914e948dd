"""AM111: a ``%run ./other`` line runs another notebook, whose names this tool cannot see.

In a notebook cell or as a Databricks ``# MAGIC %run`` line, in a file that mentions ``serverless_gpu``: the other
notebook may import ``serverless_gpu`` names this one uses (they are then not resolved here and not rewritten), or
itself need migrating. Reported for a person; it blocks nothing and changes nothing.
"""

from __future__ import annotations

import re
from typing import Optional

from air_migrate.rule_base import LineFinding, LineRule, Severity, register

_RUN = re.compile(r"^[ \t]*(?:# MAGIC ?)?[ \t]*(?P<magic>%run\b[ \t]*(?P<target>.*?))[ \t]*$")


@register
class RunMagicsRule(LineRule):
    CODE = "AM111"
    DESCRIPTION = "reported: a %run line, whose names this tool cannot see into (migrate that notebook too)"

    def check(self, line: str, shell: bool = False) -> Optional[LineFinding]:
        if shell:
            return None  # %run is a notebook magic, not a shell command
        found = _RUN.match(line)
        if found is None:
            return None
        target = found.group("target") or "another notebook"
        return LineFinding(
            found.start("magic") + 1,
            found.end("magic") + 1,
            f"%run {target} runs another notebook: names it defines are not resolved here, so uses of them are not "
            "migrated; run air-migrate on it too and check this notebook by hand",
            severity=Severity.MANUAL,
        )
