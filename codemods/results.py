"""What migrating a file gives: its report records and, when it changes, its new bytes.

Every number in a record is 1-based. ``line`` is the line in the file for plain scripts and Databricks notebook
sources (what editors show), and the line within the cell for Jupyter notebooks; ``cell`` counts every cell of a
notebook, markdown included, and is ``None`` for plain scripts.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from air_migrate.rule_base import Severity


@dataclasses.dataclass(frozen=True)
class Record:
    """One line of the report: a change, or something a person must look at."""

    path: str
    cell: Optional[int]
    """1-based cell number, for notebooks (Databricks sources and ``.ipynb``)."""
    line: int
    """1-based: the line in the file for scripts and Databricks sources, in the cell for ``.ipynb``."""
    column: int
    code: str
    message: str
    severity: Severity = Severity.CHANGE
    """What was done, and what is left for a person; ``error`` for why the file could not be processed, at the
    position where it went wrong (the file's :attr:`FileResult.error` says the same): nothing in it was migrated."""
    end_line: Optional[int] = None
    """1-based line where the reported code ends (same numbering as ``line``)."""
    end_column: Optional[int] = None
    """1-based column just past the reported code, as editors count a selection's end."""
    before: Optional[str] = None
    """For a change: the source of the changed code as it was."""
    after: Optional[str] = None
    """For a change: the source of the changed code as it is now."""

    @property
    def location(self) -> str:
        """``path[:cell N]:line:col``."""
        where = f"{self.path}:cell {self.cell}" if self.cell is not None else self.path
        return f"{where}:{self.line}:{self.column}"

    def sort_key(self) -> Tuple[int, int, int, str, str]:
        """Position order within a file (cell, line, column), then code and message for ties."""
        return (self.cell or 0, self.line, self.column, self.code, self.message)

    def __str__(self) -> str:
        return f"{self.location}: {self.code} {self.severity.value} {self.message}"


@dataclasses.dataclass
class FileResult:
    """What migrating one file gave."""

    path: str
    original: bytes
    migrated: Optional[bytes] = None
    """The new bytes, when the file changes (``None``: unchanged, blocked or failed)."""
    records: List[Record] = dataclasses.field(default_factory=list)
    error: Optional[str] = None
    """Why the file could not be processed at all (then it is left as it is)."""
    relevant: bool = False
    """It mentions serverless_gpu or the old keywords."""
    cells: Dict[int, Tuple[str, str]] = dataclasses.field(default_factory=dict)
    """Cell number -> (old source, new source) of every cell that changes, magics restored."""
    encoding: str = "utf-8"
    """The encoding of the file's bytes (what a script's coding line declares)."""

    @property
    def unreported_error(self) -> Optional[str]:
        """The error, unless one of the records already says it at its position (a script that does not parse)."""
        if self.error is None or any(
            record.severity is Severity.ERROR and record.message == self.error for record in self.records
        ):
            return None
        return self.error

    @property
    def blocked(self) -> bool:
        return any(record.severity is Severity.BLOCKING for record in self.records)

    @property
    def changed(self) -> bool:
        return self.migrated is not None and self.migrated != self.original
