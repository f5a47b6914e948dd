"""MLflow's INFO records caused by databricks.air's own tracking are not shown; the user's own MLflow calls are.

Opening a call's run prints MLflow's "Creating initial MLflow database tables..." the first time a SQLite store is
used, and the system metrics monitor announces each start and stop: four to six library lines around each call that
say nothing the user asked about. Inside :func:`quiet` (entered by the code that opens and closes a call's run),
records below WARNING from ``mlflow`` and ``alembic`` loggers, made on that thread, are dropped; warnings and errors
still show. MLflow's own ``MLFLOW_LOGGING_LEVEL`` and the ``logging`` levels a user sets keep working for their
calls; to see ours too, set ``DATABRICKS_AIR_DEBUG=1``.

The filter sits on the handlers of the ``mlflow`` logger (MLflow's own stderr handler) and of the root logger (where
a user's ``logging.basicConfig`` puts one), since a logger's own filters do not see its children's records. It is
(re)attached on each entry, so handlers configured later are covered too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Iterator

from databricks.air import _switches, _variables

_LIBRARIES = ("mlflow", "alembic")
_state = threading.local()


class _OursOnly(logging.Filter):
    """Drops INFO and DEBUG records of MLflow's loggers made on a thread inside :func:`quiet`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or not getattr(_state, "depth", 0):
            return True
        return not any(record.name == name or record.name.startswith(name + ".") for name in _LIBRARIES)


_FILTER = _OursOnly()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Hide the MLflow INFO records that the code in this block causes on this thread (see the module)."""
    if _switches.switched_on(_variables.DEBUG):
        yield
        return
    for logger in (logging.getLogger("mlflow"), logging.getLogger()):
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
