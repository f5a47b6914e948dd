"""What a rank and the call's metrics writer (:mod:`.writer`) say to each other, over the call's Unix socket, and the
rank's end of it.

A rank sends one message per batch: ``(run_id, points, now)`` pickled, each point ``(key, value, timestamp in ms,
step)``, ``now`` for a batch sent by a flush. The writer answers :data:`OK` at once (the batch is the caller's from
then on), or, for ``now``, once the batch and everything before it are written; or :data:`FAILED` followed by the
error, and the rank keeps the batch. Here is only what the ranks need: they never import the writer.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Client, Connection
from typing import Any, Callable, List, Optional, Tuple
from databricks.air._notices import notice

OK = b"+"
FAILED = b"-"

# (key, value, timestamp in ms, step)
Point = Tuple[str, float, int, int]


def encode(run_id: str, points: List[Point], now: bool) -> bytes:
    """One batch, as a rank sends it."""
    return pickle.dumps((run_id, points, now), protocol=pickle.HIGHEST_PROTOCOL)


def decode(message: bytes) -> Tuple[str, List[Point], bool]:
    """``(run_id, points, now)`` of a batch a rank sent."""
    run_id, points, now = pickle.loads(message)
    return run_id, points, now


class RankSender:
    """In a rank: sends batches to the call's :class:`~.writer.MetricsWriter`; writes them itself where it cannot."""

    def __init__(self, address: str, authkey: str, write_here: Callable[[str, List[Any]], None]) -> None:
        self._address = address
        self._authkey = authkey.encode()
        self._write_here = write_here
        self._connection: Optional[Connection] = None
        self._unreachable = False

    def __call__(self, run_id: str, metrics: List[Any], now: bool = False) -> None:
        """Hand one batch over; ``now`` (a flush waits for it): return once it is written."""
        if not self._unreachable:
            try:
                answer = self._send(run_id, [(m.key, m.value, m.timestamp, m.step) for m in metrics], now)
            except (OSError, EOFError) as error:
                self._unreachable = True  # the caller is gone (or far): from now on, this rank writes
                notice(f"the call's metrics writer cannot be reached ({error!r}); this rank writes its metrics itself")
            else:
                if answer != OK:
                    raise RuntimeError(answer[1:].decode(errors="replace"))
                return
        self._write_here(run_id, metrics)

    def _send(self, run_id: str, points: List[Point], now: bool) -> bytes:
        if self._connection is None:
            self._connection = Client(self._address, family="AF_UNIX", authkey=self._authkey)
        try:
            self._connection.send_bytes(encode(run_id, points, now))
            return self._connection.recv_bytes()
        except BaseException:
            self._connection.close()
            self._connection = None
            raise
