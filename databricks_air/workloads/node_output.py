"""One node's output during an attempt: secrets redacted, written to its log, fatal lines noticed as they come.

The log (``node_<n>.log``) holds the command's stdout and stderr, byte for byte except that every secret value
becomes ``[REDACTED]``. Beside it, ``node_<n>.times`` records when each part arrived (an offset and a time, at most
four a second), so ``air logs --minutes`` and the JSON events can say when a line was printed. Each complete line
is matched against :mod:`databricks.air.log_patterns`; a match is handed to ``on_alert``.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from typing import BinaryIO, Callable, Iterable, List, Optional, Tuple

from databricks.air import log_patterns

REDACTED = b"[REDACTED]"
MIN_REDACTED_LENGTH = 4
"""Shorter values are not redacted: replacing every ``1`` or ``ab`` of a log would make it unreadable."""
_TIME_RECORD = struct.Struct("<Qd")
TIME_STEP = 0.25
"""Seconds between two records of a ``.times`` file, at least."""

AlertHandler = Callable[[log_patterns.LogMatch], None]


class NodeOutput:
    """Feed it the node's output bytes as they come (from any one thread at a time)."""

    def __init__(self, log_path: str, times_path: str, secrets: Iterable[str] = (),
                 on_alert: Optional[AlertHandler] = None, echo: Optional[BinaryIO] = None) -> None:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self._log = open(log_path, "ab", buffering=0)
        self._times = open(times_path, "ab", buffering=0)
        self._secrets = sorted({s.encode() for s in secrets if len(s) >= MIN_REDACTED_LENGTH}, key=len, reverse=True)
        self._hold = max((len(s) for s in self._secrets), default=1) - 1
        self._pending = b""  # not yet written: may end with the start of a secret
        self._line = b""  # written, but its line is not complete yet
        self._line_number = 1
        self._written = self._log.tell()
        self._last_time = 0.0
        self._on_alert = on_alert
        self._echo = echo
        self._lock = threading.Lock()

    def write_note(self, text: str) -> None:
        """A line of our own (the attempt's end), in the log as the wrapper's lines are upstream."""
        self.feed(("\n" if self._line else "") .encode() + text.encode() + b"\n")

    def feed(self, data: bytes) -> None:
        with self._lock:
            if self._secrets:
                data = self._redact(self._pending + data)
                keep = min(self._hold, len(data))
                # Hold the tail back only while it could be the start of a secret.
                if keep and not any(s.startswith(data[len(data) - k:]) for s in self._secrets for k in range(1, keep + 1)):
                    keep = 0
                self._pending = data[len(data) - keep:] if keep else b""
                data = data[: len(data) - keep] if keep else data
            self._write(data)

    def _redact(self, data: bytes) -> bytes:
        for secret in self._secrets:
            data = data.replace(secret, REDACTED)
        return data

    def _write(self, data: bytes) -> None:
        if not data:
            return
        now = time.time()
        if now - self._last_time >= TIME_STEP:
            write_time(self._times, self._written, now)
            self._last_time = now
        self._log.write(data)
        self._written += len(data)
        if self._echo is not None:
            self._echo.write(data)
            self._echo.flush()
        lines = (self._line + data).split(b"\n")
        self._line = lines.pop()
        for line in lines:
            self._scan(line)
            self._line_number += 1
        if len(self._line) > 1 << 16:  # a "line" without end (a progress bar): scan it and move on
            self._scan(self._line)
            self._line = b""

    def _scan(self, line: bytes) -> None:
        if self._on_alert is None:
            return
        text = line.decode("utf-8", "replace")
        for found in log_patterns.scan([text.split("\r")[-1] if "\r" in text else text], start=self._line_number):
            self._on_alert(found)

    def close(self) -> None:
        """Write what is held back and scan the last line."""
        with self._lock:
            pending, self._pending = self._pending, b""
            self._write(self._redact(pending))
            if self._line:
                self._scan(self._line)
                self._line = b""
            self._log.close()
            self._times.close()


def write_time(stream: BinaryIO, offset: int, when: float) -> None:
    """Record in a ``.times`` file that the log's byte ``offset`` was printed at ``when``."""
    stream.write(_TIME_RECORD.pack(offset, when))


def read_times(times_path: str) -> List[Tuple[int, float]]:
    """``(offset, time)`` records of a log, in order (empty when there are none)."""
    try:
        with open(times_path, "rb") as stream:
            data = stream.read()
    except OSError:
        return []
    usable = len(data) - len(data) % _TIME_RECORD.size
    return [_TIME_RECORD.unpack_from(data, at) for at in range(0, usable, _TIME_RECORD.size)]
