"""The errors of the workload command, each with upstream's JSON ``code``/``kind`` and the exit status it gives.

Exit statuses: 2 for a bad workload file or bad arguments (what the user typed or wrote), 1 for anything else.
"""

from __future__ import annotations

from databricks.air._rebuildable import RebuildableError
from databricks.air.exceptions import ServerlessGpuCustomerError


class WorkloadError(ServerlessGpuCustomerError):
    """A workload command failed; ``str()`` is the message shown to the user."""

    code = "INTERNAL_ERROR"
    kind = "PERMANENT"
    exit_status = 1
    retryable = False


class InvalidArguments(WorkloadError):
    """The command line is wrong (a flag, an override, an id)."""

    code = "INVALID_ARGS"
    exit_status = 2


class WorkloadFileError(RebuildableError, InvalidArguments):
    """The workload file is unreadable or breaks a rule of the schema: ``path: message``.

    Attributes:
        path: the dotted field path (``compute.num_accelerators``), or the file's name for the file as a whole.
        problem: what is wrong there, and what to do.
    """

    def __init__(self, problem: str, *, path: str = "") -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path = path
        self.problem = problem


class RunNotFound(WorkloadError):
    """No run has that id in the registry."""

    code = "NOT_FOUND"
    kind = "NOT_FOUND"


class UnsupportedHere(WorkloadError):
    """The workload is valid, but the chosen backend cannot run it (too many nodes, a container image...)."""

    exit_status = 2
    code = "INVALID_ARGS"


class NoSpaceLeft(WorkloadError):
    """The file system that holds the registry (``~/.air``, or ``DATABRICKS_AIR_HOME``) is full."""
