"""The ``databricks.air: `` prefix of every line the library writes of its own, in one place.

A user tells the library's lines from their ranks' output by it (and filters on it); the closing line, warnings,
and what went wrong beside the call all begin with it. It imports nothing: any module may use it.
"""

from __future__ import annotations

import sys

PREFIX = "databricks.air: "


def prefixed(text: str) -> str:
    """``text`` as one of the library's own lines."""
    return PREFIX + text


def notice(text: str) -> None:
    """Write ``text`` to the caller's standard error as one of the library's own lines, at once (a rank's or a
    call's output may follow on the same stream)."""
    print(PREFIX + text, file=sys.stderr, flush=True)
