"""Likely causes of a failure or a hang, read from every rank's output: the fatal lines users meet, with what to do.

Each rank's log (``rank_<r>.txt``) is scanned with the shared table of :mod:`databricks.air.log_patterns` (only its
last :data:`SCANNED_BYTES`, where a long training's fatal lines are; line numbers still count from the start of the
file). One line per cause and rank is reported, causes before consequences: a peer's "Connection closed by peer"
follows another rank's death, so the rank that died first, when known, is named first.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from databricks.air import log_patterns

SCANNED_BYTES = 8 << 20
MAX_CAUSES = 8


@dataclasses.dataclass(frozen=True)
class Cause:
    """One fatal line of one rank's output."""

    rank: int
    found: log_patterns.LogMatch

    def describe(self) -> str:
        return f"rank {self.rank}, line {self.found.line_number}: {self.found.pattern.title}. {self.found.hint}"


def find(log_paths: Dict[int, str], root_rank: Optional[int] = None) -> List[Cause]:
    """The likely causes in the ranks' logs (rank -> path), root causes first; ``root_rank`` leads among equals."""
    causes: List[Cause] = []
    for rank, path in sorted(log_paths.items()):
        seen = set()
        for found in _scan_tail(path):
            if found.pattern.id not in seen:  # one line per cause and rank: the first, which is the cause
                seen.add(found.pattern.id)
                causes.append(Cause(rank, found))
    order = {log_patterns.FATAL: 0, log_patterns.ERROR: 1, log_patterns.WARNING: 2}

    def key(cause: Cause) -> Tuple[bool, int, int, int]:
        return (
            cause.found.pattern.consequence,
            order.get(cause.found.pattern.severity, 3),
            0 if cause.rank == root_rank else 1,
            cause.rank,
        )

    return sorted(causes, key=key)[:MAX_CAUSES]


def section(causes: Sequence[Cause]) -> Optional[str]:
    """The report's "Likely causes" section, or ``None`` when nothing matched."""
    if not causes:
        return None
    return "Likely causes, from the ranks' output:\n" + "\n".join(f"  {cause.describe()}" for cause in causes)


def _scan_tail(path: str) -> List[log_patterns.LogMatch]:
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            skipped_lines = 0
            if size > SCANNED_BYTES:
                remaining, last = size - SCANNED_BYTES, b"\n"
                while remaining > 0:  # count the lines before the tail, so line numbers stay those of the file
                    chunk = stream.read(min(remaining, 1 << 20))
                    if not chunk:
                        break
                    skipped_lines += chunk.count(b"\n")
                    remaining, last = remaining - len(chunk), chunk[-1:]
                if last != b"\n" and stream.readline():  # the tail starts at a whole line
                    skipped_lines += 1
            text = stream.read().decode(errors="replace")
    except OSError:
        return []
    return list(log_patterns.scan(text.splitlines(), start=skipped_lines + 1))
