"""A one-line progress bar on standard error, for long runs watched in a terminal (drawn by ``tqdm``).

It is drawn only when standard error is a terminal and there are enough files for a run to take a while; it never
goes to standard output or a report file. Before anything else is printed the bar is erased (``\\r`` and "erase to
the end of the line"), so report lines and diffs never carry it; the next file done draws it again.
"""

from __future__ import annotations

from typing import Any, Optional, TextIO

MIN_FILES = 20
"""Fewer files than this finish too fast for a bar to help."""
ERASE = "\r\x1b[K"
_FORMAT = "air-migrate [{bar:30}] {n_fmt}/{total_fmt} files, {elapsed}<{remaining}"
_INTERVAL_S = 0.1


def wanted(stream: TextIO, total: int, disabled: bool) -> bool:
    """Whether a bar is drawn on ``stream`` for ``total`` files."""
    isatty = getattr(stream, "isatty", None)
    return not disabled and total >= MIN_FILES and bool(isatty and isatty())


class Progress:
    """``air-migrate [=========>          ] 120/400 files, 00:03<00:07``, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO, total: int, enabled: bool) -> None:
        self._stream = stream
        self._total = total
        self._done = 0
        self._shown = False
        self._bar: Optional[Any] = None
        self._sink = _Sink(stream)
        if enabled:
            # Imported only here: most runs draw no bar, and every run pays for what it imports at start-up.
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                file=self._sink,
                bar_format=_FORMAT,
                ascii=" >=",
                mininterval=_INTERVAL_S,
                leave=False,
                delay=1e-9,  # drawn by the first file done, not before any
            )

    def advance(self) -> None:
        """One more file is done."""
        self._done += 1
        if self._bar is None:
            return
        drawn = self._bar.update(1)
        if not drawn and (not self._shown or self._done == self._total):
            self._bar.refresh()  # after an erase, and at the end, whatever the interval
        self._shown = True

    def clear(self) -> None:
        """Erase the bar (before other output); the next :meth:`advance` draws it again."""
        if self._shown:
            self._stream.write(ERASE)
            self._stream.flush()
            self._shown = False

    def close(self) -> None:
        """Erase the bar for good and let ``tqdm`` go, without a line of its own after the output."""
        self.clear()
        if self._bar is not None:
            self._sink.muted = True
            self._bar.close()
            self._bar = None


class _Sink:
    """Where ``tqdm`` writes: the stream, until the bar is closed (its closing redraw would follow the summary)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.muted = False

    def write(self, text: str) -> None:
        if not self.muted:
            self._stream.write(text)

    def flush(self) -> None:
        if not self.muted:
            self._stream.flush()
