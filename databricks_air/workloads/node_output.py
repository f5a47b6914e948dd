"""One node's output during an attempt: secrets redacted, written to its log, fatal lines noticed as they come.

The log (``node_<n>.log``) holds the command's stdout and stderr, byte for byte except that every secret value
becomes ``[REDACTED]``. Beside it, ``node_<n>.times`` records when each part arrived (an offset and a time, at most
four a second), so ``air logs --minutes`` and the JSON events can say when a line was printed. Each complete line
is matched against :mod:`databricks.air.log_patterns`; a match is handed to ``on_alert``.

A log that cannot be written (a full disk) is not an error of the reader that feeds it: the output records why in
:attr:`NodeOutput.failure` (``no space left on device while writing node 0's log (PATH)``) and drops what comes
after, so that whoever copies the command's output goes on reading it (a command blocked on a full pipe would never
end); the supervisor sees the failure, stops the command and fails the attempt with it.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
from typing import BinaryIO, Callable, Iterable, List, Optional, Protocol, Tuple

from databricks.air import log_patterns

REDACTED = b"[REDACTED]"
MIN_REDACTED_LENGTH = 4
"""Shorter values are not redacted: replacing every ``1`` or ``ab`` of a log would make it unreadable."""
_TIME_RECORD = struct.Struct("<Qd")
TIME_STEP = 0.25
"""Seconds between two records of a ``.times`` file, at least."""

AlertHandler = Callable[[log_patterns.LogMatch], None]


class Echo(Protocol):
    """Where a node's output is copied besides its log: a binary stream, of which only these are used."""

    def write(self, data: bytes) -> int: ...

    def flush(self) -> None: ...


class NodeOutput:
    """Feed it the node's output bytes as they come (from any one thread at a time)."""

    def __init__(
        self,
        log_path: str,
        times_path: str,
        secrets: Iterable[str] = (),
        on_alert: Optional[AlertHandler] = None,
        echo: Optional[Echo] = None,
        name: str = "the log",
    ) -> None:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self.name = name
        """What the log is, in :attr:`failure` (``node 0's log``)."""
        self.path = log_path
        self.failure: Optional[str] = None
        """Why the log could not be written (then nothing more is); ``None`` while all is well."""
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
        self.feed(("\n" if self._line else "").encode() + text.encode() + b"\n")

    def feed(self, data: bytes) -> None:
        with self._lock:
            if self.failure is not None:
                return
            if self._secrets:
                data = self._redact(self._pending + data)
                keep = min(self._hold, len(data))
                # Hold the tail back only while it could be the start of a secret.
                if keep and not any(
                    s.startswith(data[len(data) - k :]) for s in self._secrets for k in range(1, keep + 1)
                ):
                    keep = 0
                self._pending = data[len(data) - keep :] if keep else b""
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
        try:
            if now - self._last_time >= TIME_STEP:
                write_time(self._times, self._written, now)
                self._last_time = now
            _write_all(self._log, data)
        except OSError as error:
            self._failed(error)
            return
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

    def _failed(self, error: OSError) -> None:
        full = error.errno in (errno.ENOSPC, errno.EDQUOT)
        what = "no space left on device" if full else (error.strerror or str(error)).lower()
        self.failure = f"{what} while writing {self.name} ({self.path})"

    def close(self) -> None:
        """Write what is held back and scan the last line."""
        with self._lock:
            if self.failure is None:
                pending, self._pending = self._pending, b""
                self._write(self._redact(pending))
                if self._line:
                    self._scan(self._line)
                    self._line = b""
            for stream in (self._log, self._times):
                try:
                    stream.close()
                except OSError:
                    pass


def _write_all(stream: BinaryIO, data: bytes) -> None:
    """Write all of ``data`` to an unbuffered file (which may take only part of it, as a nearly full disk does)."""
    view = memoryview(data)
    while view:
        written = stream.write(view)
        if not written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


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
