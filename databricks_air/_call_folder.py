"""A call's log folder and what lies in it: each file's name is spelled here once, for the engine that writes it and
for every reader (the call's MLflow run, the restarts, the messages that point at a file).

The folder is made, locked and pruned by :mod:`databricks.air._log_folders`; it stays after the call::

    <YYYYmmdd-HHMMSS>-<function>-<random>/
        .running                    locked by the caller while the call runs
        rank_<r>.txt                each rank's output
        stragglers.json             the straggler watch's figures and the stragglers it named
        flight_recorder_rank_<r>    torch's flight recorder dump, when NCCL's own watchdog fires
        .last_checkpoint            the step of the last checkpoint rank 0 saved
        snapshot/                   where the ranks were when the call stopped them (a ReportFolder)
        stall_<n>/                  where they were when the call found them stalled the n-th time (a ReportFolder)
        attempt_<n>/                a failed attempt's files, kept aside before its restart

and each report's folder (:class:`ReportFolder`)::

    summary.txt                     the report, every rank's sources and the likely causes
    rank_<r>.txt                    one rank's full stacks and collectives
    suspects.json                   for tools: the suspect ranks and why the call stopped
"""

from __future__ import annotations

import glob
import os
from typing import List

SNAPSHOT = "snapshot"
"""The folder of the report taken when the call stopped its ranks."""
_LOCK = ".running"  # locked by a running call's caller (removed when the call ends)
_RANK_LOG = "rank_{rank}.txt"
_STALL = "stall_{number}"
_ATTEMPT_PREFIX = "attempt_"
_STRAGGLERS = "stragglers.json"
_FLIGHT_RECORDER_PREFIX = "flight_recorder_rank_"  # torch appends the rank
_LAST_CHECKPOINT = ".last_checkpoint"  # a dot file: it stays when an attempt's files are kept aside
_SUMMARY = "summary.txt"
_SUSPECTS = "suspects.json"


class ReportFolder:
    """The folder of one report of where the ranks were (:mod:`~databricks.air._engine.stop_report`)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def summary(self) -> str:
        return os.path.join(self.path, _SUMMARY)

    def rank(self, rank: int) -> str:
        """Where rank ``rank``'s full stacks and collectives are."""
        return os.path.join(self.path, _RANK_LOG.format(rank=rank))

    @property
    def suspects(self) -> str:
        return os.path.join(self.path, _SUSPECTS)


class CallFolder:
    """The paths of one call's log folder (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def lock(self) -> str:
        return os.path.join(self.path, _LOCK)

    def rank_log(self, rank: int) -> str:
        """Where rank ``rank``'s output goes."""
        return os.path.join(self.path, _RANK_LOG.format(rank=rank))

    def rank_logs(self) -> List[str]:
        """Every rank's output file there is now, sorted by name."""
        return sorted(glob.glob(os.path.join(self.path, _RANK_LOG.format(rank="*"))))

    @property
    def stragglers(self) -> str:
        return os.path.join(self.path, _STRAGGLERS)

    @property
    def flight_recorder_prefix(self) -> str:
        """What torch's flight recorder dumps to, once torch has appended the rank."""
        return os.path.join(self.path, _FLIGHT_RECORDER_PREFIX)

    @property
    def last_checkpoint(self) -> str:
        return os.path.join(self.path, _LAST_CHECKPOINT)

    @property
    def snapshot(self) -> ReportFolder:
        """The report taken when the call stopped its ranks."""
        return ReportFolder(os.path.join(self.path, SNAPSHOT))

    def stall(self, number: int) -> ReportFolder:
        """The report of the call's ``number``-th stall (from 1)."""
        return ReportFolder(os.path.join(self.path, _STALL.format(number=number)))

    def attempt(self, attempt: int) -> str:
        """Where attempt ``attempt``'s files are kept once it failed and the call restarts."""
        return os.path.join(self.path, f"{_ATTEMPT_PREFIX}{attempt}")

    def attempt_files(self) -> List[str]:
        """The names of what the attempt now running left at the top of the folder, sorted: all but dot files (the
        caller's lock, the last checkpoint's note) and the earlier attempts' folders."""
        return [
            name
            for name in sorted(os.listdir(self.path))
            if not name.startswith(".") and not name.startswith(_ATTEMPT_PREFIX)
        ]
