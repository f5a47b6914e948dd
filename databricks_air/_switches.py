"""Reading on/off environment variables the same way everywhere."""

from __future__ import annotations

import os

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def switched_on(variable: str) -> bool:
    """True when ``variable`` is ``1``, ``true``, ``yes`` or ``on`` (any case); off when unset."""
    return os.environ.get(variable, "").strip().lower() in _ON


def switched_off(variable: str) -> bool:
    """True when ``variable`` is ``0``, ``false``, ``no`` or ``off`` (any case); on when unset."""
    return os.environ.get(variable, "").strip().lower() in _OFF
