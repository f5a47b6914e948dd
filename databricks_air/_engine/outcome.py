"""How each rank of a call ended: what the rank left behind, and what the caller knows of it.

Every way a rank can end is an :class:`OutcomeKind`. A rank that gets to the end of its function writes a
:class:`RankRecord` (its value, or how it failed) to its result file; the caller reads it with :func:`read_record`,
and keeps one :class:`RankOutcome` per rank: the record, the exit status, and when the launcher stopped it. Records
are made here and nowhere else, by the rank (:meth:`RankRecord.returned`, :meth:`RankRecord.failed`) and by the
caller where the rank could not say it itself (:meth:`RankRecord.unreadable`, :meth:`RankRecord.host_lost`).

Example::

    outcome = RankOutcome(rank=0, pid=pid, log_path=log_path)
    ...  # the rank exits
    outcome.status, outcome.record = 0, read_record(files.result(0), 0)
    if outcome.kind is OutcomeKind.RETURNED:
        value = outcome.record.value
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import signal
import time
import traceback
import types
from typing import Any, Dict, Optional, Union

import cloudpickle

from databricks.air._engine.values import load_value, read_value_file


class OutcomeKind(enum.Enum):
    """How a rank ended (or that it has not yet)."""

    RUNNING = "running"
    """It has not ended yet."""
    RETURNED = "returned"
    """The function returned, and its value came back."""
    RAISED = "raised"
    """The function (or the rank's setup before it) raised an exception."""
    EXITED = "exited"
    """The function called ``sys.exit()`` with a status other than 0 (with 0 it counts as returning ``None``)."""
    INTERRUPTED = "interrupted"
    """A ``KeyboardInterrupt`` ended the function inside the rank."""
    UNPICKLABLE_RESULT = "unpicklable-result"
    """The value could not be pickled in the rank, or not be unpickled in the caller."""
    HOST_LOST = "host-lost"
    """The process hosting the rank died with it (a Ray actor whose node was lost, say)."""
    DIED = "died"
    """The process ended without a record of how its function ended: a signal, ``os._exit``, a crash."""


@dataclasses.dataclass(frozen=True)
class RankRecord:
    """What a rank left behind: its value, or how it failed (written by the rank, read by the caller)."""

    kind: OutcomeKind
    value: Any = None
    """The function's return value (``RETURNED`` only)."""
    error_type: str = ""
    """The exception's class, ``module.QualName`` (``QualName`` for builtins)."""
    message: str = ""
    """What went wrong, in words."""
    traceback: str = ""
    """The exception's traceback, from the user's first frame."""
    time: float = dataclasses.field(default_factory=time.time)
    """``time.time()`` when the record was made (on the rank's machine)."""
    exception: Optional[bytes] = None
    """The cloudpickled exception, when it pickles; pickled apart, so that a class the caller cannot import
    spoils only this field."""
    collectives: Optional[Dict[str, Any]] = None
    """How far the rank got in each process group's collectives when it ended (the probe's answer,
    :func:`~databricks.air._engine.rank_probe.collective_positions`); ``None`` when it never imported
    ``torch.distributed``."""

    @classmethod
    def returned(cls, value: Any) -> "RankRecord":
        return cls(OutcomeKind.RETURNED, value=value)

    @classmethod
    def failed(
        cls,
        kind: OutcomeKind,
        error: BaseException,
        message: Optional[str] = None,
        frames: Optional[types.TracebackType] = None,
    ) -> "RankRecord":
        """Describe a failure so that the caller can rebuild it; ``frames`` is the part of the traceback to show
        (default: all of it)."""
        error_type = type(error)
        module = "" if error_type.__module__ == "builtins" else f"{error_type.__module__}."
        shown = error.__traceback__ if frames is None else frames
        try:
            pickled: Optional[bytes] = cloudpickle.dumps(error)
        except Exception:  # noqa: BLE001 - the record travels without it
            pickled = None
        return cls(
            kind,
            error_type=f"{module}{error_type.__qualname__}",
            message=str(error) if message is None else message,
            traceback="".join(traceback.format_exception(error_type, error, shown)),
            exception=pickled,
        )

    @classmethod
    def unreadable(cls, rank: int, error: BaseException) -> "RankRecord":
        """The caller could not unpickle what rank ``rank`` returned (its class lives where the caller has none)."""
        return cls(
            OutcomeKind.UNPICKLABLE_RESULT,
            message=f"the return value of rank {rank} cannot be unpickled in the caller: "
            f"{type(error).__name__}: {error}",
        )

    @classmethod
    def host_lost(cls, what: str) -> "RankRecord":
        """The process hosting the rank died, and the rank with it; ``what`` says what happened, in words."""
        return cls(OutcomeKind.HOST_LOST, message=what)


def read_record(source: Union[str, bytes, None], rank: int) -> Optional[RankRecord]:
    """The record rank ``rank`` wrote, from its result file's path or contents; ``None`` where it wrote none."""
    if source is None or (isinstance(source, str) and not os.path.exists(source)):
        return None
    try:
        if isinstance(source, bytes):
            return load_value(io.BytesIO(source), f"the result of rank {rank}")
        return read_value_file(source)
    except Exception as error:  # noqa: BLE001 - a value the caller cannot unpickle
        return RankRecord.unreadable(rank, error)


@dataclasses.dataclass
class RankOutcome:
    """How one rank ended, as far as the caller knows."""

    rank: int
    pid: int
    log_path: str
    status: Optional[int] = None
    """Exit status (negative: killed by that signal); ``None`` while running."""
    record: Optional[RankRecord] = None
    """What the rank left behind, once it has ended (``None``: nothing)."""
    exited_at: Optional[float] = None
    """``time.time()`` when the caller learned of the exit."""
    stopped_at: Optional[float] = None
    """``time.time()`` when the launcher began stopping this rank (another failed, timeout, interrupt)."""

    @property
    def kind(self) -> OutcomeKind:
        if self.status is None:
            return OutcomeKind.RUNNING
        if self.record is None or (self.record.kind is OutcomeKind.RETURNED and self.status != 0):
            return OutcomeKind.DIED  # a rank that returned exits 0; any other status came after its value
        return self.record.kind

    @property
    def running(self) -> bool:
        return self.status is None

    @property
    def succeeded(self) -> bool:
        return self.kind is OutcomeKind.RETURNED

    @property
    def value(self) -> Any:
        """The rank's return value (only when it :attr:`succeeded`)."""
        if self.record is None or not self.succeeded:
            raise ValueError(f"rank {self.rank} has no return value (its outcome: {self.kind.value})")
        return self.record.value

    @property
    def stopped_by_launcher(self) -> bool:
        return self.stopped_at is not None

    @property
    def returned_when_stopped(self) -> bool:
        """It returned (or exited 0) only once the launcher had begun stopping it: a SIGTERM handler that saved its
        progress and called ``sys.exit(0)``, say."""
        return (
            self.succeeded
            and self.stopped_at is not None
            and self.record is not None
            and self.record.time >= self.stopped_at
        )

    @property
    def failed_on_its_own(self) -> bool:
        """It failed, and not merely because the launcher stopped it after another failure."""
        if self.running or self.succeeded:
            return False
        if self.stopped_at is None:
            return True
        # Stopped by the launcher: a failure only if it had already failed when the stop began.
        return self._failure_time is not None and self._failure_time < self.stopped_at

    @property
    def failed_at(self) -> float:
        """When it failed: the time of its failure record, else when the caller learned of its exit."""
        if self._failure_time is not None:
            return self._failure_time
        return float(self.exited_at or 0.0)

    @property
    def _failure_time(self) -> Optional[float]:
        if self.record is None or self.record.kind is OutcomeKind.RETURNED:
            return None
        return self.record.time


def describe_status(status: Optional[int]) -> str:
    """``exit code 1``, ``killed by SIGKILL``..."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}"
    return f"exit code {status}"
