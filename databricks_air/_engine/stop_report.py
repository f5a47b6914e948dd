"""The report of where a call's ranks were when it was stopped (or found stalled), and the files that keep it.

:meth:`Call.stop <databricks.air._engine.call.Call.stop>` takes a snapshot of the ranks it is about to stop
(:mod:`~databricks.air._engine.snapshot`), and this module turns the outcomes and the snapshot into a
:class:`StopReport`: the table and the suspect (:mod:`~databricks.air._engine.hang_report`), written to the call's
log folder as ``snapshot/summary.txt`` (the report, every rank's sources and the likely causes), one
``snapshot/rank_<r>.txt`` per rank (its full stacks and collectives) and ``snapshot/suspects.json`` (for tools: the
suspect ranks and why the call stopped). A stall writes the same into ``stall_<n>/``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Iterable, List, Mapping, Optional

from databricks.air._engine import hang_report
from databricks.air._engine.outcome import OutcomeKind, RankOutcome, describe_status
from databricks.air._engine.snapshot import RankSnapshot

SNAPSHOT_FOLDER = "snapshot"


@dataclasses.dataclass
class StopReport:
    """Where the ranks were at one moment, and the folder that keeps the details."""

    reason: str
    """``timeout``, ``interrupt``, ``failure`` or ``stall``."""
    report: hang_report.HangReport
    folder: Optional[str]
    """The folder holding ``summary.txt`` and ``rank_<r>.txt``; ``None`` when it could not be written."""
    snapshots: Dict[int, RankSnapshot]

    @property
    def suspects(self) -> List[int]:
        return self.report.suspects

    def text(self, heading: str) -> str:
        """The report for a message: the heading, one line per rank, the verdict, and where the stacks are."""
        lines = [self.report.text(heading)]
        if self.folder is not None:
            lines.append(f"Every rank's stacks: {self.folder}")
        return "\n".join(lines)

    def table(self, heading: str, ranks: Iterable[int]) -> str:
        """Only the lines of ``ranks`` (the ranks still running when another failed), with the heading."""
        wanted = {f"  rank {rank}:" for rank in ranks}
        lines = [line for line in self.report.table if any(line.startswith(w) for w in wanted)]
        text = "\n".join([heading, *lines])
        return text + (f"\nEvery rank's stacks: {self.folder}" if self.folder is not None else "")


def build(
    reason: str,
    outcomes: Mapping[int, RankOutcome],
    snapshots: Dict[int, RankSnapshot],
    log_dir: str,
    folder_name: str = SNAPSHOT_FOLDER,
) -> StopReport:
    """The report over every rank of the call, its files written under ``log_dir/folder_name``."""
    views = [_view(outcome, snapshots.get(rank)) for rank, outcome in sorted(outcomes.items())]
    report = hang_report.build(views)
    folder: Optional[str] = os.path.join(log_dir, folder_name)
    try:
        _write(folder, reason, report, snapshots)  # type: ignore[arg-type]
    except OSError:
        folder = None
    return StopReport(reason, report, folder, snapshots)


def _view(outcome: RankOutcome, snapshot: Optional[RankSnapshot]) -> hang_report.RankView:
    if outcome.running:
        return hang_report.RankView(outcome.rank, snapshot=snapshot)
    raised = None
    if outcome.kind is OutcomeKind.RAISED and outcome.record is not None:
        raised = outcome.record.error_type.rsplit(".", 1)[-1]
    return hang_report.RankView(outcome.rank, ended=describe_status(outcome.status), raised=raised)


def _write(folder: str, reason: str, report: hang_report.HangReport, snapshots: Dict[int, RankSnapshot]) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "summary.txt"), "w") as stream:
        stream.write(report.text(f"Where the ranks were ({reason}):") + "\n")
        for rank, snapshot in sorted(snapshots.items()):
            failing = {source: state for source, state in snapshot.sources.items() if state != "ok"}
            if failing:
                stream.write(f"\nrank {rank}: " + "; ".join(f"{k}: {v}" for k, v in sorted(failing.items())) + "\n")
    for rank, snapshot in snapshots.items():
        with open(os.path.join(folder, f"rank_{rank}.txt"), "w") as stream:
            stream.write(snapshot.text)
    with open(os.path.join(folder, "suspects.json"), "w") as stream:
        json.dump({"reason": reason, "suspect_ranks": report.suspects, "verdict": report.verdict}, stream)
