"""The few numbers a DataLoader shares with its worker processes, in a small memory-mapped file.

The main process writes, before each pass, which pass it is, its epoch and the position it starts from; while
the pass runs, it writes how far the training loop has got (``released``: every position before it has been
consumed). Workers read the first three when a pass begins, so persistent workers follow ``set_epoch`` and resumed
states, and read ``released`` before evicting cached files, so a file that is still in flight is never evicted.

A file rather than ``multiprocessing`` shared memory: a path pickles under every start method (fork, spawn,
forkserver) and in any process, with no resource tracker involved.
"""

from __future__ import annotations

import mmap
import os
from typing import Any, Dict, Optional

_FIELDS = ("pass_id", "epoch", "start", "released")
_SIZE = 8 * len(_FIELDS)


def ensure_zeroed(path: str, size: int) -> None:
    """Make ``path`` at least ``size`` bytes long, zeros where it was shorter, without losing what is there.

    Safe when several processes do it at once: a file created empty by one and mapped by another before the first
    wrote its bytes would fail to map, while extending with ``ftruncate`` never shortens or overwrites.
    """
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(descriptor).st_size < size:
            os.ftruncate(descriptor, size)
    finally:
        os.close(descriptor)


class Control:
    """Shared counters. ``Control(path)`` maps a file; ``Control()`` keeps them in this process only."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path
        self._view: Any = None
        self._pid = -1
        if path is not None:
            ensure_zeroed(path, _SIZE)

    def _values(self) -> Any:
        if self._view is None or (self.path is not None and self._pid != os.getpid()):
            if self.path is None:
                self._view = memoryview(bytearray(_SIZE)).cast("q")
            else:
                with open(self.path, "r+b") as stream:
                    mapped = mmap.mmap(stream.fileno(), _SIZE)
                self._view = memoryview(mapped).cast("q")
            self._pid = os.getpid()
        return self._view

    def get(self, name: str) -> int:
        return int(self._values()[_FIELDS.index(name)])

    def set(self, **values: int) -> None:
        view = self._values()
        for name, value in values.items():
            view[_FIELDS.index(name)] = int(value)

    def __getstate__(self) -> Dict[str, Any]:
        if self.path is None:
            return {"path": None, "values": [self.get(name) for name in _FIELDS]}
        return {"path": self.path}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.path = state["path"]
        self._view = None
        self._pid = -1
        if self.path is None:
            self.set(**dict(zip(_FIELDS, state["values"])))
