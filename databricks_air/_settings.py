"""Every number or on/off setting of ours that the environment holds: its variable, default, parser and message,
side by side (:class:`Setting`), read the same way by the decorator and by ``air run``.

A bad value fails with :class:`~databricks.air.exceptions.RuntimeConfigurationError`, whose message names the
variable, the value, what is accepted and how to get the default: ``DATABRICKS_AIR_TERMINATE_GRACE_SECONDS must be
a number of seconds, not 'abc'; unset it for the default, 3 s``. A call reads and checks all of its settings at once
(:func:`read`), before it prints, makes or records anything (no log folder, no MLflow run, no store); ``air run``
checks the workload's (:data:`WORKLOAD`) before it records a run, and says the same message. Whatever reads a
setting later (the log folders, the MLflow run, the engine, a run's supervisor) is handed the value read here, or
reads it here again.

Example::

    settings = read(os.environ)        # RuntimeConfigurationError for DATABRICKS_AIR_LOG_KEEP_CALLS=abc
    settings.keep_calls, settings.log_root, settings.engine()
    TERMINATE_GRACE_SECONDS.read(os.environ)   # 3.0 when unset
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from typing import Any, Callable, Dict, Generic, Mapping, Optional, Sequence, TypeVar

from databricks.air import _variables
from databricks.air._switches import OFF, ON
from databricks.air.exceptions import RuntimeConfigurationError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: what it is called, what an unset (or blank) one means, how a value is read."""

    variable: str
    default: T
    parse: Callable[[str], T]
    """The value of a (stripped, non-empty) text; ``ValueError`` for one that is not accepted."""
    accepted: str
    """What is accepted, for the message: ``a number of seconds``."""
    when_unset: str
    """What unsetting it gives, for the message: ``for the default, 3 s``."""

    def read(self, environ: Mapping[str, str]) -> T:
        """The value ``environ`` gives; :class:`RuntimeConfigurationError` for a bad one."""
        text = environ.get(self.variable, "").strip()
        if not text:
            return self.default
        try:
            return self.parse(text)
        except ValueError:
            raise RuntimeConfigurationError(
                f"{self.variable} must be {self.accepted}, not {environ[self.variable]!r}; unset it {self.when_unset}"
            ) from None


def switch(variable: str, default: bool) -> Setting[bool]:
    """An on/off variable: ``1``, ``true``, ``yes``, ``on`` or ``0``, ``false``, ``no``, ``off`` (any case)."""

    def parse(text: str) -> bool:
        if text.lower() in ON:
            return True
        if text.lower() in OFF:
            return False
        raise ValueError(text)

    return Setting(
        variable,
        default,
        parse,
        f"one of {', '.join(ON)} (on) or {', '.join(OFF)} (off)",
        f"for the default ({'on' if default else 'off'})",
    )


def seconds(variable: str, default: float, positive: bool = False) -> Setting[float]:
    """A finite number of seconds (a negative one counts as 0, which turns a watch off), or more than 0 when
    ``positive``."""
    what = "a number of seconds above 0" if positive else "a number of seconds"
    return Setting(
        variable, default, _positive_seconds if positive else _seconds, what, f"for the default, {default:g} s"
    )


def _seconds(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(text)
    return max(0.0, number)


def _positive_seconds(text: str) -> float:
    number = _seconds(text)
    if number <= 0:
        raise ValueError(text)
    return number


def limit(variable: str, default: float, whole: bool) -> Setting[float]:
    """A limit ``>= 0``, ``0`` meaning none: a whole number (``whole``) or any finite number."""

    def parse(text: str) -> float:
        value: float = int(text) if whole else float(text)
        if value < 0 or not math.isfinite(value):
            raise ValueError(text)
        return value

    kind = "a whole number" if whole else "a number"
    return Setting(variable, default, parse, f"{kind} >= 0 (0: no limit)", f"for the default, {default:g}")


def _gpu_count(text: str) -> Optional[int]:
    count = int(text)
    if count < 0 or count > 4096:
        raise ValueError(text)
    return count or None


# --- the settings -------------------------------------------------------------------------------------------------

SHOW_ALL_RANKS = switch(_variables.SHOW_ALL_RANKS, False)
DEBUG = switch(_variables.DEBUG, False)
MLFLOW = switch(_variables.MLFLOW, True)
SYSTEM_METRICS = switch(_variables.SYSTEM_METRICS, True)
TRACKING_HOST = switch(_variables.TRACKING_HOST, True)
TRACKING_HOST_IDLE_SECONDS = seconds(_variables.TRACKING_HOST_IDLE_SECONDS, 600.0, positive=True)
TERMINATE_GRACE_SECONDS = seconds(_variables.TERMINATE_GRACE_SECONDS, 3.0)
SNAPSHOT_SECONDS = seconds(_variables.SNAPSHOT_SECONDS, 5.0)
STALL_SECONDS = seconds(_variables.STALL_SECONDS, 600.0)
STRAGGLER_SECONDS = seconds(_variables.STRAGGLER_SECONDS, 30.0)
LOG_KEEP_CALLS = limit(_variables.LOG_KEEP_CALLS, 50, whole=True)
LOG_KEEP_DAYS = limit(_variables.LOG_KEEP_DAYS, 7.0, whole=False)
LOG_UPLOAD_SECONDS = seconds(_variables.LOG_UPLOAD_SECONDS, 30.0, positive=True)
SYSTEM_METRICS_SECONDS = seconds(_variables.SYSTEM_METRICS_SECONDS, 10.0, positive=True)
SIMULATE_GPUS: Setting[Optional[int]] = Setting(
    _variables.SIMULATE_GPUS, None, _gpu_count, "a whole number of GPUs from 0 to 4096", "to count the real ones"
)
"""The GPU count this node shows, or ``None`` (unset, or 0: the real ones)."""
RETRY_DELAY_SECONDS = seconds(_variables.RETRY_DELAY_SECONDS, 1.0)
WORKLOAD_TIMEOUT_SECONDS: Setting[Optional[float]] = Setting(
    _variables.WORKLOAD_TIMEOUT_SECONDS,
    None,
    _positive_seconds,
    "a number of seconds above 0",
    "for the workload's timeout_minutes",
)
"""An attempt's time limit in place of the workload's ``timeout_minutes`` (``None``: that one)."""

WORKLOAD: Sequence[Setting[Any]] = (
    MLFLOW,
    SYSTEM_METRICS,
    SYSTEM_METRICS_SECONDS,
    LOG_UPLOAD_SECONDS,
    TERMINATE_GRACE_SECONDS,
    RETRY_DELAY_SECONDS,
    WORKLOAD_TIMEOUT_SECONDS,
    DEBUG,
)
"""What a workload's run reads (its supervisor, its attempts' MLflow runs): checked by ``air run`` before a run is
recorded."""


@dataclasses.dataclass(frozen=True)
class CallSettings:
    """What the environment says about one call, checked."""

    show_all_ranks: bool
    start_method: str
    grace_period: float
    snapshot_seconds: float
    stall_seconds: float
    straggler_seconds: float
    log_root: str
    """Where the call's log folder is made (it may not exist yet; a folder can be made there)."""
    keep_calls: int
    keep_days: float
    tracking: bool
    """An MLflow run for the call (``DATABRICKS_AIR_MLFLOW``)."""
    log_upload_seconds: float
    system_metrics: bool
    system_metrics_seconds: float

    def engine(self) -> Dict[str, Any]:
        """The part the engine's :class:`~databricks.air._engine.call.Launch` takes."""
        return dict(
            show_all_ranks=self.show_all_ranks,
            start_method=self.start_method,
            grace_period=self.grace_period,
            snapshot_seconds=self.snapshot_seconds,
            stall_seconds=self.stall_seconds,
            straggler_seconds=self.straggler_seconds,
        )


def read(environ: Mapping[str, str]) -> CallSettings:
    """Every setting of a call from ``environ``; :class:`RuntimeConfigurationError` naming the first bad one."""
    DEBUG.read(environ)  # read where a traceback is shaped; checked here with the others
    TRACKING_HOST.read(environ)  # read at decoration (where a bad value cannot fail) and by the tracking host
    TRACKING_HOST_IDLE_SECONDS.read(environ)
    return CallSettings(
        show_all_ranks=SHOW_ALL_RANKS.read(environ),
        start_method=environ.get(_variables.START_METHOD, "fork").strip().lower() or "fork",
        grace_period=TERMINATE_GRACE_SECONDS.read(environ),
        snapshot_seconds=SNAPSHOT_SECONDS.read(environ),
        stall_seconds=STALL_SECONDS.read(environ),
        straggler_seconds=STRAGGLER_SECONDS.read(environ),
        log_root=log_root(environ),
        keep_calls=int(LOG_KEEP_CALLS.read(environ)),
        keep_days=LOG_KEEP_DAYS.read(environ),
        tracking=MLFLOW.read(environ),
        log_upload_seconds=LOG_UPLOAD_SECONDS.read(environ),
        system_metrics=SYSTEM_METRICS.read(environ),
        system_metrics_seconds=SYSTEM_METRICS_SECONDS.read(environ),
    )


def check(environ: Mapping[str, str], settings: Sequence[Setting[Any]]) -> None:
    """:class:`RuntimeConfigurationError` for the first of ``settings`` that ``environ`` gives a bad value."""
    for setting in settings:
        setting.read(environ)


def default_log_root() -> str:
    """``databricks-air-logs`` in the temporary folder."""
    return os.path.join(tempfile.gettempdir(), "databricks-air-logs")


def log_root(environ: Mapping[str, str]) -> str:
    """``DATABRICKS_AIR_LOG_DIR`` (or the default), once it is known that a call's folder can be made in it: a
    folder this user can write, or a path whose nearest existing parent is one."""
    given = environ.get(_variables.LOG_DIR, "")
    where = os.path.abspath(given or default_log_root())
    problem = _unwritable(where)
    if problem is None:
        return where
    remedy = (
        f"point {_variables.LOG_DIR} at a folder you can write, or unset it for the default ({default_log_root()})"
        if given
        else f"set {_variables.LOG_DIR} to a folder you can write"
    )
    named = f"{_variables.LOG_DIR}={given!r}" if given else f"the log folder {where}"
    raise RuntimeConfigurationError(f"call logs cannot be kept in {named}: {problem}; {remedy}")


def _unwritable(path: str) -> Optional[str]:
    """Why no call folder can be made in ``path``, or ``None``."""
    existing = path
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    if not os.path.isdir(existing):
        return f"{existing} is {'a file' if os.path.isfile(existing) else 'something'}, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"this user cannot write in {existing}"
    return None
