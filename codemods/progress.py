"""A one-line progress bar on standard error, for long runs watched in a terminal.

It is drawn only when standard error is a terminal and there are enough files for a run to take a while; it never
goes to standard output or a report file. Before anything else is printed the bar is erased, so report lines and
diffs never carry it.
"""

from __future__ import annotations

import time
from typing import TextIO

MIN_FILES = 20
"""Fewer files than this finish too fast for a bar to help."""
_WIDTH = 30
_INTERVAL_S = 0.1


def wanted(stream: TextIO, total: int, disabled: bool) -> bool:
    """Whether a bar is drawn on ``stream`` for ``total`` files."""
    isatty = getattr(stream, "isatty", None)
    return not disabled and total >= MIN_FILES and bool(isatty and isatty())


class Progress:
    """``air-migrate [=========>          ] 120/400 files``, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, total: int, enabled: bool) -> None:
        self._stream = stream
        self._total = total
        self._enabled = enabled
        self._done = 0
        self._shown = False
        self._last_draw = 0.0

    def advance(self) -> None:
        """One more file is done."""
        self._done += 1
        if not self._enabled:
            return
        now = time.monotonic()
        if not self._shown or now - self._last_draw >= _INTERVAL_S or self._done == self._total:
            self._draw()
            self._last_draw = now

    def clear(self) -> None:
        """Erase the bar (before other output); the next :meth:`advance` draws it again."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False

    def _draw(self) -> None:
        filled = _WIDTH * self._done // max(self._total, 1)
        bar = "=" * filled + (">" if filled < _WIDTH else "") + " " * max(_WIDTH - filled - 1, 0)
        self._stream.write(f"\rair-migrate [{bar}] {self._done}/{self._total} files")
        self._stream.flush()
        self._shown = True
