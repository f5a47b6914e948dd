"""Reading on/off environment variables the same way everywhere (a call checks its own, refusing other values, in
:mod:`databricks.air._settings`)."""

from __future__ import annotations

import os

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


def switched_on(variable: str) -> bool:
    """True when ``variable`` is ``1``, ``true``, ``yes`` or ``on`` (any case); off when unset."""
    return os.environ.get(variable, "").strip().lower() in ON


def switched_off(variable: str) -> bool:
    """True when ``variable`` is ``0``, ``false``, ``no`` or ``off`` (any case); on when unset."""
    return os.environ.get(variable, "").strip().lower() in OFF
