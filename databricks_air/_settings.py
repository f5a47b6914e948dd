"""Every setting a ``.distributed()`` call takes from the environment, read and checked here, once per call.

:func:`read` runs before the call prints, makes or records anything (no log folder, no MLflow run, no store), so
that a bad value is the call's only output, and its message says how to get the default. Whatever reads a setting
later (the log folders, the MLflow run, the engine) is handed the value read here; nothing reads it again.

Example::

    settings = read(os.environ)        # RuntimeConfigurationError for DATABRICKS_AIR_LOG_KEEP_CALLS=abc
    settings.keep_calls, settings.log_root, settings.engine()
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from typing import Any, Dict, Mapping, Optional

from databricks.air import _variables
from databricks.air._switches import OFF, ON
from databricks.air.exceptions import RuntimeConfigurationError

DEFAULT_KEEP_CALLS = 50
DEFAULT_KEEP_DAYS = 7.0
DEFAULT_UPLOAD_SECONDS = 30.0
DEFAULT_SYSTEM_METRICS_SECONDS = 10.0
DEFAULT_STRAGGLER_SECONDS = 30.0


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
    switch(environ, _variables.DEBUG, False)  # read where a traceback is shaped; checked here with the others
    return CallSettings(
        show_all_ranks=switch(environ, _variables.SHOW_ALL_RANKS, False),
        start_method=environ.get(_variables.START_METHOD, "fork").strip().lower() or "fork",
        grace_period=seconds(environ, _variables.TERMINATE_GRACE_SECONDS, 3.0),
        snapshot_seconds=seconds(environ, _variables.SNAPSHOT_SECONDS, 5.0),
        stall_seconds=seconds(environ, _variables.STALL_SECONDS, 600.0),
        straggler_seconds=seconds(environ, _variables.STRAGGLER_SECONDS, DEFAULT_STRAGGLER_SECONDS),
        log_root=log_root(environ),
        keep_calls=int(_limit(environ, _variables.LOG_KEEP_CALLS, DEFAULT_KEEP_CALLS, whole=True)),
        keep_days=_limit(environ, _variables.LOG_KEEP_DAYS, DEFAULT_KEEP_DAYS, whole=False),
        tracking=switch(environ, _variables.MLFLOW, True),
        log_upload_seconds=seconds(environ, _variables.LOG_UPLOAD_SECONDS, DEFAULT_UPLOAD_SECONDS, positive=True),
        system_metrics=switch(environ, _variables.SYSTEM_METRICS, True),
        system_metrics_seconds=seconds(
            environ, _variables.SYSTEM_METRICS_SECONDS, DEFAULT_SYSTEM_METRICS_SECONDS, positive=True
        ),
    )


def switch(environ: Mapping[str, str], variable: str, default: bool) -> bool:
    """An on/off variable: ``1``, ``true``, ``yes``, ``on`` or ``0``, ``false``, ``no``, ``off`` (any case)."""
    value = environ.get(variable, "").strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise RuntimeConfigurationError(
        f"{variable} must be one of {', '.join(ON)} (on) or {', '.join(OFF)} (off), not {environ[variable]!r}; "
        f"unset it for the default ({'on' if default else 'off'})"
    )


def seconds(environ: Mapping[str, str], variable: str, default: float, positive: bool = False) -> float:
    """A finite number of seconds (a negative one counts as 0, which turns a watch off), or more than 0 when
    ``positive``; ``default`` when unset."""
    value = environ.get(variable, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or (positive and number <= 0):
        what = "a number of seconds above 0" if positive else "a number of seconds"
        raise RuntimeConfigurationError(
            f"{variable} must be {what}, not {environ[variable]!r}; unset it for the default, {default:g} s"
        )
    return max(0.0, number)


def _limit(environ: Mapping[str, str], variable: str, default: float, whole: bool) -> float:
    text = environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value: float = int(text) if whole else float(text)
    except ValueError:
        value = -1
    if value < 0 or not math.isfinite(value):
        kind = "a whole number" if whole else "a number"
        raise RuntimeConfigurationError(
            f"{variable} must be {kind} >= 0 (0: no limit), not {environ[variable]!r}; unset it for the default, "
            f"{default:g}"
        )
    return value


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
