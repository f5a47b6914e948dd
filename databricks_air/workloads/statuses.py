"""The run statuses, spelled as upstream spells them, in one table for every command and backend."""

from __future__ import annotations

PENDING = "PENDING"
"""Submitted; the environment is being prepared."""
RUNNING = "RUNNING"
WAITING_FOR_RETRY = "WAITING_FOR_RETRY"
"""An attempt failed or timed out; the next one starts shortly."""
SUCCESS = "SUCCESS"
FAILED = "FAILED"
CANCELED = "CANCELED"
TIMEDOUT = "TIMEDOUT"
"""The last attempt ran past ``timeout_minutes``."""
DAMAGED = "DAMAGED"
"""Ours, for ``list`` only: the run's ``state.json`` or ``spec.json`` cannot be read, so its status is unknown."""
DRY_RUN_OK = "DRY_RUN_OK"
"""``run --dry-run``: the file is valid; nothing was started."""

ACTIVE = (PENDING, RUNNING, WAITING_FOR_RETRY)
TERMINAL = (SUCCESS, FAILED, CANCELED, TIMEDOUT)

# How an attempt's MLflow run ends.
MLFLOW_STATUS = {SUCCESS: "FINISHED", FAILED: "FAILED", TIMEDOUT: "FAILED", CANCELED: "KILLED"}


def is_terminal(status: str) -> bool:
    """True once a run has ended (``SUCCESS``, ``FAILED``, ``CANCELED``, ``TIMEDOUT``)."""
    return status in TERMINAL
