"""The report of a run: one line per record, the files that failed, and a closing summary; as text or JSON.

Text lines read ``path[:cell N]:line:col: AMxxx <severity> <message>``. The JSON report is one object::

    {"version": 1,
     "summary": {"mode": "check", "scanned": 3, "relevant": 2, "changed": 1, "changes": 2,
                 "needs_person": 1, "blocked": 0, "failed": 0, "notes": 0},
     "records": [{"file": "job.py", "cell": null, "line": 1, "col": 1, "end_line": 1, "end_col": 39,
                  "code": "AM101", "severity": "change", "message": "...", "before": "...", "after": "..."}],
     "errors": [{"file": "bad.py", "message": "not UTF-8 (invalid start byte at byte 17)"}]}

with records sorted by file, then position, and every number 1-based (see :mod:`air_migrate.results`). Every file
that failed is in ``errors`` (and counted in ``failed``); a script that does not parse is also a record of severity
``error`` at the place where it stops being Python, which the text report shows instead of an error line.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

from air_migrate.colors import Palette
from air_migrate.results import FileResult, Record
from air_migrate.rule_base import Severity

TEXT = "text"
JSON = "json"
FORMATS = (TEXT, JSON)
JSON_VERSION = 1
_SEVERITY_STYLES = {
    Severity.INFO: "cyan",
    Severity.CHANGE: "green",
    Severity.REVIEW: "yellow",
    Severity.MANUAL: "magenta",
    Severity.BLOCKING: "bold red",
    Severity.ERROR: "bold red",
}


@dataclasses.dataclass
class Tally:
    """What a run found, gathered file by file (records and errors are kept; file contents are not)."""

    mode: str
    partial: bool = False
    """``--partial``: files with blocking items are converted as far as they can be."""
    scanned: int = 0
    relevant: int = 0
    changed: int = 0
    changes: int = 0
    needs_person: int = 0
    blocked: int = 0
    notes: int = 0
    """Records of severity ``info``: nothing to do, never a reason to fail ``--check``."""
    records: List[Record] = dataclasses.field(default_factory=list)
    errors: List[Tuple[str, str]] = dataclasses.field(default_factory=list)

    def add(self, result: FileResult) -> None:
        self.scanned += 1
        self.relevant += result.relevant
        self.records.extend(result.records)
        if result.error is not None:
            self.errors.append((result.path, result.error))
            return
        blocked = result.blocked and not self.partial
        self.blocked += blocked
        self.changed += result.changed
        if result.changed and not blocked:  # a blocked file's changes are not made (it may only get TODOs)
            self.changes += sum(1 for record in result.records if record.severity.rewritten)
        self.needs_person += sum(1 for record in result.records if record.severity.needs_person)
        self.notes += sum(1 for record in result.records if record.severity is Severity.INFO)

    @property
    def failed(self) -> int:
        return len(self.errors)


def record_line(record: Record, palette: Palette = Palette(False)) -> str:
    """``path[:cell N]:line:col: AMxxx <severity> <message>``, coloured by ``palette``."""
    severity = palette.paint(record.severity.value, _SEVERITY_STYLES[record.severity])
    return f"{palette.paint(record.location, 'bold')}: {palette.paint(record.code, 'bold')} {severity} {record.message}"


def error_line(path: str, message: str, palette: Palette = Palette(False)) -> str:
    return f"{palette.paint(path, 'bold')}: {palette.paint('error', 'bold red')}: {message}"


def summary_line(tally: Tally, verb: str) -> str:
    """The closing line; it says so plainly when nothing relevant was found, or files were not converted."""
    line = (
        f"air-migrate: {tally.scanned} file(s) scanned, {tally.relevant} mention serverless_gpu, its keywords or "
        f"TorchDistributor, "
        f"{tally.changed} {verb} ({tally.changes} change(s)), {tally.needs_person} item(s) need a person, "
        f"{tally.failed} failed"
    )
    if tally.notes:
        line += f", {tally.notes} note(s)"
    if tally.blocked:
        line += f"; {tally.blocked} file(s) not converted because of blocking items (see --partial)"
    if tally.relevant == 0 and tally.failed == 0:
        line += "; nothing to migrate was found"
    return line


def render_text(tally: Tally, verb: str) -> str:
    """The ``--report FILE`` text: every record, every error, then the summary."""
    lines = [record_line(record) for record in tally.records]
    recorded = {(record.path, record.message) for record in tally.records if record.severity is Severity.ERROR}
    lines += [error_line(path, message) for path, message in tally.errors if (path, message) not in recorded]
    lines.append(summary_line(tally, verb))
    return "".join(line + "\n" for line in lines)


def render_json(tally: Tally) -> str:
    """The ``--report-format json`` document (see the module docstring)."""
    document: Dict[str, Any] = {
        "version": JSON_VERSION,
        "summary": {
            "mode": tally.mode,
            "scanned": tally.scanned,
            "relevant": tally.relevant,
            "changed": tally.changed,
            "changes": tally.changes,
            "needs_person": tally.needs_person,
            "blocked": tally.blocked,
            "failed": tally.failed,
            "notes": tally.notes,
        },
        "records": [record_object(record) for record in tally.records],
        "errors": [{"file": path, "message": message} for path, message in tally.errors],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def record_object(record: Record) -> Dict[str, Optional[object]]:
    """One record as a JSON object."""
    return {
        "file": record.path,
        "cell": record.cell,
        "line": record.line,
        "col": record.column,
        "end_line": record.end_line,
        "end_col": record.end_column,
        "code": record.code,
        "severity": record.severity.value,
        "message": record.message,
        "before": record.before,
        "after": record.after,
    }
