"""How long this process has waited for data in our DataLoader's ``next()``, in total, and for how many batches.

Counted by :class:`~databricks.air.data.metrics.BatchTimer` for every batch a :class:`~databricks.air.data.DataLoader`
hands out, and read, without importing anything, by the rank's probe when the launcher's straggler watch asks
(:mod:`databricks.air._engine.issue_times`): a rank late into its collectives that waits longer for data than the
others is waiting for data, not computing. Two additions per batch; no lock (one training loop per process).
"""

from __future__ import annotations

seconds = 0.0
"""Seconds spent waiting in ``next()`` of our DataLoaders, in total."""
batches = 0
"""Batches our DataLoaders handed out, in total."""


def add(waited: float) -> None:
    """One batch handed out after ``waited`` seconds in ``next()``."""
    global seconds, batches
    seconds += waited
    batches += 1
