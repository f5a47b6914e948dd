"""The report of where a call's ranks were when it was stopped (or found stalled), and the files that keep it.

:meth:`Call.stop <databricks.air._engine.call.Call.stop>` takes a snapshot of the ranks it is about to stop
(:mod:`~databricks.air._engine.snapshot`), and this module turns the outcomes and the snapshot into a
:class:`StopReport`: the table and the suspect (:mod:`~databricks.air._engine.hang_report`), written to the call's
log folder (a :class:`~databricks.air._call_folder.ReportFolder`) as ``snapshot/summary.txt`` (the report, every
rank's sources and the likely causes), one ``snapshot/rank_<r>.txt`` per rank (its full stacks and collectives) and
``snapshot/suspects.json`` (for tools: the suspect ranks and why the call stopped). A stall writes the same into
``stall_<n>/``. The headings of the report's texts live here, beside it (:data:`HEADINGS`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, Iterable, List, Mapping, Optional

from databricks.air._call_folder import ReportFolder
from databricks.air._engine import hang_report
from databricks.air._engine.outcome import OutcomeKind, RankOutcome, describe_status
from databricks.air._engine.snapshot import RankSnapshot
from databricks.air._engine.supervision import StopReason
from databricks.air._notices import PREFIX

HEADINGS: Dict[StopReason, str] = {
    StopReason.INTERRUPT: PREFIX + "interrupted. Where the ranks were:",
    StopReason.TIMEOUT: "Where the ranks were when the time was up:",
    StopReason.STALL: "Where the ranks are (the call goes on):",
    StopReason.FAILURE: "Where the ranks were:",
}
"""The heading of :meth:`StopReport.text`, by why the report was taken."""
OTHERS_WHEN_FAILED = "When rank {rank} failed, the other ranks were:"
"""The heading of :meth:`StopReport.table`: the ranks stopped when another failed."""
SUMMARY = "Where the ranks were ({reason}):"
"""The heading of ``summary.txt``."""
STACKS = "Every rank's stacks: {folder}"
"""The line that ends a report written to its folder."""


@dataclasses.dataclass
class StopReport:
    """Where the ranks were at one moment, and the folder that keeps the details."""

    reason: StopReason
    """Why the report was taken: the call stopped its ranks (a failure, the timeout, an interrupt), or found them
    stalled."""
    report: hang_report.HangReport
    folder: Optional[str]
    """The folder holding ``summary.txt`` and ``rank_<r>.txt``; ``None`` when it could not be written."""
    snapshots: Dict[int, RankSnapshot]

    @property
    def suspects(self) -> List[int]:
        return self.report.suspects

    def text(self) -> str:
        """The report for a message: the heading of its reason (:data:`HEADINGS`), one line per rank, the verdict,
        and where the stacks are."""
        return self._with_folder([self.report.text(HEADINGS[self.reason])])

    def table(self, failed: int, ranks: Iterable[int]) -> str:
        """Only the lines of ``ranks`` (the ranks still running when rank ``failed`` failed), with the heading
        :data:`OTHERS_WHEN_FAILED`."""
        return self._with_folder([OTHERS_WHEN_FAILED.format(rank=failed), *self.report.lines(ranks)])

    def _with_folder(self, lines: List[str]) -> str:
        if self.folder is not None:
            lines.append(STACKS.format(folder=self.folder))
        return "\n".join(lines)


def build(
    reason: StopReason,
    outcomes: Mapping[int, RankOutcome],
    snapshots: Dict[int, RankSnapshot],
    folder: ReportFolder,
) -> StopReport:
    """The report over every rank of the call, its files written into ``folder``."""
    views = [_view(outcome, snapshots.get(rank)) for rank, outcome in sorted(outcomes.items())]
    report = hang_report.build(views)
    try:
        _write(folder, reason, report, snapshots)
    except OSError:
        return StopReport(reason, report, None, snapshots)
    return StopReport(reason, report, folder.path, snapshots)


def _view(outcome: RankOutcome, snapshot: Optional[RankSnapshot]) -> hang_report.RankView:
    if outcome.running:
        return hang_report.RankView(outcome.rank, snapshot=snapshot)
    raised = None
    if outcome.kind is OutcomeKind.RAISED and outcome.record is not None:
        raised = outcome.record.error_type.rsplit(".", 1)[-1]
    return hang_report.RankView(outcome.rank, ended=describe_status(outcome.status), raised=raised)


def _write(
    folder: ReportFolder, reason: StopReason, report: hang_report.HangReport, snapshots: Dict[int, RankSnapshot]
) -> None:
    os.makedirs(folder.path, exist_ok=True)
    with open(folder.summary, "w") as stream:
        stream.write(report.text(SUMMARY.format(reason=reason.value)) + "\n")
        for rank, snapshot in sorted(snapshots.items()):
            failing = {source: state for source, state in snapshot.sources.items() if state != "ok"}
            if failing:
                stream.write(f"\nrank {rank}: " + "; ".join(f"{k}: {v}" for k, v in sorted(failing.items())) + "\n")
    for rank, snapshot in snapshots.items():
        with open(folder.rank(rank), "w") as stream:
            stream.write(snapshot.text)
    with open(folder.suspects, "w") as stream:
        json.dump({"reason": reason.value, "suspect_ranks": report.suspects, "verdict": report.verdict}, stream)
