"""A rank's per-step metrics for the call's run: queued in microseconds, handed on once a second.

Why not MLflow's asynchronous logging alone: it queues each point as a batch of its own, with a
``threading.Event``, a ``Future`` and a task in a status-check thread pool that waits for it. Measured on 2 CPU
ranks (``bench/metrics_logging.py``), that is about 0.2 ms of the training thread's time per ``log_metric`` call
and thread switches besides: the seed example's loop ran 1.3 to 1.6 times the loop without per-step logging. Here a
point is one ``deque.append`` (thread-safe and safe in a signal handler, so no lock is needed); one thread per rank
passes up to 1,000 points (MLflow's limit for one ``log_batch``) to ``write`` every
``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS`` (1 s unless the user chose), or sooner when 1,000 are waiting.

``write`` hands the batch to the call's writer in the caller (:mod:`databricks.air._tracking.writer`, which says why
the rank does not write it), or, where the rank cannot reach it, calls MLflow's ``log_batch`` in the rank. A batch
that SQLite refuses because another writer holds its lock is written again, not dropped. A batch that fails for
another reason is kept and tried again at the next flush; what cannot be written when the rank ends is said on
stderr, with the count, never dropped silently.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, List, Optional, Tuple
from databricks.air._notices import notice

if TYPE_CHECKING:
    from concurrent.futures import Future

_BUFFERING = "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS"
BATCH = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
_LOCKED_RETRY_SECONDS = (0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0)  # each attempt also waits MLflow's 20 s for the lock

# (metric, future of the batch it is written in)
_Point = Tuple[Any, "Future[None]"]


class MetricBuffer:
    """Points for one run, written by one daemon thread; :meth:`flush` waits until what is queued is written.

    Only that thread writes: a flush from the rank's main thread asks it and waits, holding no lock the thread
    needs, so a SIGTERM whose handler flushes again (the rank is being stopped) cannot deadlock with it.
    """

    def __init__(
        self, run_id: str, write: Callable[[str, List[Any], bool], None], interval: Optional[float] = None
    ) -> None:
        self.run_id = run_id
        # (run_id, metrics, now): log_batch, or a hand-over to the call's writer; now: a flush waits for this batch
        self._write = write
        self._interval = buffering_seconds() if interval is None else interval
        self._points: Deque[_Point] = collections.deque()
        self._future = _new_future()  # the batch the next point joins
        self._wake = threading.Event()
        self._flushes = threading.Condition()
        self._asked = 0  # flushes asked for; the thread has answered the first `_answered` of them
        self._answered = 0
        self._final = False  # a flush for the rank's end was asked: failed batches are tried again on the spot
        self._thread: Optional[threading.Thread] = None
        self._failed_before = False
        self._held_elsewhere = False  # batches were handed over without a wait since the last flush

    def add(self, metric: Any) -> "Future[None]":
        """Queue one point; the future is done once the batch holding it is written."""
        future = self._future
        self._points.append((metric, future))
        if self._thread is None:
            self._start()
        elif len(self._points) >= BATCH and not self._wake.is_set():
            self._wake.set()
        return future

    def flush(self, *, final: bool = False) -> None:
        """Wait until every point queued so far is written (or its batch failed). ``final``: the rank is ending;
        failed batches are tried again a few times, and what still cannot be written is counted on stderr."""
        if self._thread is None:
            return  # nothing was ever queued
        with self._flushes:
            self._asked += 1
            asked = self._asked
            self._final |= final
        self._wake.set()
        with self._flushes:
            while self._answered < asked and self._thread.is_alive():
                self._flushes.wait(0.5)
        left = len(self._points)
        if left and final:
            notice(
                f"{left} metric point(s) could not be written to MLflow run {self.run_id} "
                f"(see the error above); they are lost"
            )

    # --- the writer ---------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="databricks-air-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            with self._flushes:
                asked, final = self._asked, self._final  # what is queued now includes every asker's points
            self._write_queued(attempts=3 if final else 1, now=asked > self._answered)
            with self._flushes:
                self._answered = max(self._answered, asked)
                self._flushes.notify_all()

    def _write_queued(self, attempts: int, now: bool = True) -> None:
        """Write what is queued, in batches, up to the first that fails (it and the rest stay queued).

        ``now``: a flush waits. Batches handed over without it may still be held by the call's writer: an empty
        batch with ``now`` makes it write them, even when nothing is queued here.
        """
        if not self._points:
            if now and self._held_elsewhere:
                error = self._write_batch([], attempts, now=True)
                self._held_elsewhere = error is not None
                if error is not None:
                    self._say(error)
            return
        self._held_elsewhere = self._held_elsewhere or not now
        self._future = _new_future()  # points queued from now on join the next batch
        written: set = set()
        while self._points:
            batch = [self._points.popleft() for _ in range(min(BATCH, len(self._points)))]
            error = self._write_batch([metric for metric, _ in batch], attempts, now)
            if error is not None:
                self._points.extendleft(reversed(batch))  # kept, in order, for the next flush
                self._done(written - {future for _, future in self._points})
                self._say(error)
                return
            written.update(future for _, future in batch)
        self._done(written)
        self._failed_before = False
        if now:
            self._held_elsewhere = False

    @staticmethod
    def _done(futures: set) -> None:
        for future in futures:
            if not future.done():
                future.set_result(None)

    def _write_batch(self, metrics: List[Any], attempts: int, now: bool) -> Optional[BaseException]:
        return attempt(lambda: self._write(self.run_id, metrics, now), attempts)

    def _say(self, error: BaseException) -> None:
        if not self._failed_before:  # once per outage, not once a second
            notice(
                f"could not write {len(self._points)} metric point(s) to MLflow run {self.run_id} "
                f"({type(error).__name__}: {error}); they are kept and written again"
            )
        self._failed_before = True


def _new_future() -> "Future[None]":
    # Imported here, not at the top: the caller imports this module, and a script's own concurrent.py in its folder
    # must not be imported before any rank starts (tests/engine/test_lifecycle.py).
    from concurrent.futures import Future

    return Future()


def attempt(write: Callable[[], Any], attempts: int) -> Optional[BaseException]:
    """Call ``write`` up to ``attempts`` times, a second apart (each also again while SQLite's file is locked); the
    last error, or ``None`` once it succeeded. Errors are kept and reported by the caller, not raised."""
    error: Optional[BaseException] = None
    for number in range(attempts):
        if number:
            time.sleep(1.0)
        try:
            write_locked_again(write)
            return None
        except Exception as failure:  # noqa: BLE001 - kept and reported
            error = failure
    return error


def write_locked_again(write: Callable[[], Any]) -> Any:
    """``write()``, again while SQLite says the database is locked.

    With SQLite every rank and the caller write into one file, and a write waits for the lock at most MLflow's busy
    timeout (20 s): on a busy machine, behind the other writers, it can wait longer. A batch is one transaction
    (rolled back whole when it fails), so writing it again adds nothing twice.
    """
    for pause in _LOCKED_RETRY_SECONDS:
        try:
            return write()
        except Exception as error:  # only a locked database is tried again
            if "database is locked" not in str(error):
                raise
            time.sleep(pause)
    return write()


def buffering_seconds() -> float:
    """``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS``: how long a rank holds its points (1 s unless the user chose)."""
    try:
        return max(0.05, float(os.environ.get(_BUFFERING, "1")))  # 0: as soon as possible, without spinning
    except ValueError:
        return 1.0
