"""The rank's metric buffer (``_tracking/rank_buffer.py``) on its own: batches, order, failures kept, and what is
said."""

from __future__ import annotations

import threading
import time
from typing import List, Tuple

import pytest

from databricks.air._tracking.rank_buffer import MetricBuffer, write_locked_again


class Store:
    """Records each batch it is given; fails the next ``failures`` writes with ``error``."""

    def __init__(self, failures: int = 0, error: str = "connection refused") -> None:
        self.batches: List[Tuple[str, List[int]]] = []
        self.failures = failures
        self.error = error

    def write(self, run_id: str, metrics: List[int], now: bool = True) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError(self.error)
        self.batches.append((run_id, list(metrics)))

    @property
    def points(self) -> List[int]:
        return [point for _, batch in self.batches for point in batch]


def test_points_are_written_in_order_in_batches_of_at_most_a_thousand() -> None:
    store = Store()
    buffer = MetricBuffer("run", store.write, interval=60)
    futures = [buffer.add(point) for point in range(2500)]
    buffer.flush()
    assert store.points == list(range(2500))
    assert max(len(batch) for _, batch in store.batches) <= 1000  # MLflow's limit for one log_batch
    assert {run for run, _ in store.batches} == {"run"}
    assert all(future.done() for future in futures)


def test_the_writer_thread_writes_without_a_flush() -> None:
    store = Store()
    buffer = MetricBuffer("run", store.write, interval=0.05)
    future = buffer.add(1)
    future.result(timeout=10)
    assert store.points == [1]


def test_a_thousand_waiting_points_wake_the_writer_before_its_interval() -> None:
    store = Store()
    buffer = MetricBuffer("run", store.write, interval=60)
    futures = [buffer.add(point) for point in range(1000)]
    futures[-1].result(timeout=10)
    assert store.points == list(range(1000))


def test_points_added_from_many_threads_all_land_once() -> None:
    store = Store()
    buffer = MetricBuffer("run", store.write, interval=0.01)

    def add(offset: int) -> None:
        for point in range(offset, offset + 2000):
            buffer.add(point)

    threads = [threading.Thread(target=add, args=(offset,)) for offset in range(0, 8000, 2000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    buffer.flush()
    assert sorted(store.points) == list(range(8000))


def test_a_failed_batch_is_kept_in_order_and_written_at_the_next_flush(capsys: pytest.CaptureFixture) -> None:
    store = Store(failures=2)
    buffer = MetricBuffer("run", store.write, interval=60)
    for point in range(5):
        buffer.add(point)
    buffer.flush()
    buffer.flush()  # the second failure: said once, not again
    err = capsys.readouterr().err
    assert err.count("could not write 5 metric point(s) to MLflow run run (RuntimeError: connection refused)") == 1
    assert store.points == []
    buffer.add(5)
    buffer.flush()
    assert store.points == [0, 1, 2, 3, 4, 5]


@pytest.mark.slow
def test_what_cannot_be_written_at_the_end_is_counted_on_stderr(capsys: pytest.CaptureFixture) -> None:
    store = Store(failures=100)
    buffer = MetricBuffer("run", store.write, interval=60)
    future = buffer.add(1)
    buffer.add(2)
    buffer.flush(final=True)  # tried three times, a second apart
    err = capsys.readouterr().err
    assert "could not write 2 metric point(s)" in err
    assert "databricks.air: 2 metric point(s) could not be written to MLflow run run" in err and "lost" in err
    assert not future.done()


def test_a_locked_database_is_tried_again_and_other_errors_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("databricks.air._tracking.rank_buffer._LOCKED_RETRY_SECONDS", (0.01, 0.01))
    calls = []

    def locked_twice() -> str:
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "written"

    assert write_locked_again(locked_twice) == "written" and len(calls) == 3

    def refused() -> None:
        calls.append(time.monotonic())
        raise RuntimeError("connection refused")

    calls.clear()
    with pytest.raises(RuntimeError, match="connection refused"):
        write_locked_again(refused)
    assert len(calls) == 1


def test_a_flush_from_a_signal_handler_during_a_flush_does_not_deadlock() -> None:
    """A rank stopped with SIGTERM flushes from its handler, maybe while its main thread is flushing already."""
    import signal

    written = threading.Event()

    def slow(run_id: str, metrics: List[int], now: bool = True) -> None:
        time.sleep(0.5)  # the handler's flush arrives while this batch is being written
        store.write(run_id, metrics)
        written.set()

    store = Store()
    buffer = MetricBuffer("run", slow, interval=60)
    handled = []

    def on_alarm(signum: int, frame: object) -> None:
        buffer.add(99)
        buffer.flush(final=True)
        handled.append(True)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        for point in range(3):
            buffer.add(point)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        buffer.flush()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert handled == [True] and written.is_set()
    assert store.points == [0, 1, 2, 99]
