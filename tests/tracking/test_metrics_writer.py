"""The call's metrics writer (``_tracking/writer.py``) with real sockets: batches handed over, put together, flushed,
kept when the store fails, and a rank that cannot reach it writes itself."""

from __future__ import annotations

import threading
import time
from multiprocessing.connection import Client
from typing import Any, Iterator, List, Tuple

import pytest

from databricks.air._tracking import wire
from databricks.air._tracking.wire import RankSender
from databricks.air._tracking.writer import MetricsWriter

pytest.importorskip("mlflow")
from mlflow.entities import Metric


class Store:
    def __init__(self) -> None:
        self.calls: List[Tuple[str, List[Any]]] = []
        self.failures = 0
        self.written = threading.Event()

    def write(self, run_id: str, metrics: List[Any]) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the tracking server is down")
        self.calls.append((run_id, list(metrics)))
        self.written.set()

    @property
    def steps(self) -> List[int]:
        return [metric.step for _, metrics in self.calls for metric in metrics]


def points(start: int, count: int) -> List[Any]:
    return [Metric("loss", 1.0, 1000 + step, step) for step in range(start, start + count)]


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def writer(store: Store) -> Iterator[MetricsWriter]:
    writer = MetricsWriter("run", store.write, hold=60)
    yield writer
    writer.close()


def sender(writer: MetricsWriter, here: List[Any]) -> RankSender:
    return RankSender(writer.address, writer.authkey, lambda run_id, metrics, now=True: here.extend(metrics))


def test_batches_handed_over_are_put_together_and_written_at_a_thousand_points(
    writer: MetricsWriter, store: Store
) -> None:
    ranks = [sender(writer, []), sender(writer, [])]
    ranks[0]("run", points(0, 300))  # answered at once: held by the writer
    ranks[1]("run", points(0, 300))
    time.sleep(0.3)
    assert store.calls == []
    ranks[0]("run", points(300, 400))
    assert store.written.wait(10)
    assert len(store.calls) == 1 and len(store.calls[0][1]) == 1000  # one log_batch for both ranks


def test_a_flush_is_answered_once_everything_before_it_is_written(writer: MetricsWriter, store: Store) -> None:
    rank = sender(writer, [])
    rank("run", points(0, 5))
    rank("run", [], now=True)  # what the rank's buffer sends for a flush with nothing queued
    assert store.steps == [0, 1, 2, 3, 4]


def test_what_waits_is_written_when_the_call_ends(store: Store, capfd: pytest.CaptureFixture) -> None:
    writer = MetricsWriter("run", store.write, hold=60)
    here: List[Any] = []
    sender(writer, here)("run", points(0, 7))
    writer.close()
    assert store.steps == list(range(7)), (here, capfd.readouterr().err)


def test_a_held_batch_the_store_refuses_is_kept_and_written_at_the_next_try(
    writer: MetricsWriter, store: Store, capfd: pytest.CaptureFixture
) -> None:
    store.failures = 1
    rank = sender(writer, [])
    rank("run", points(0, 1000))  # due at once; refused, kept by the writer
    time.sleep(0.5)
    assert store.calls == []
    assert "could not write the ranks' metrics to MLflow run run (RuntimeError: the tracking server is down)" in (
        capfd.readouterr().err
    )
    rank("run", points(1000, 3), now=True)
    assert store.steps == list(range(1003))


def test_a_flushed_batch_the_store_refuses_goes_back_to_the_rank(writer: MetricsWriter, store: Store) -> None:
    store.failures = 1
    with pytest.raises(RuntimeError, match="the tracking server is down"):
        sender(writer, [])("run", points(0, 3), now=True)
    assert store.calls == []


def test_another_run_and_a_closed_writer_are_refused(store: Store) -> None:
    writer = MetricsWriter("run", store.write, hold=60)
    rank = sender(writer, [])
    with pytest.raises(RuntimeError, match="this call writes run run, not other"):
        rank("other", points(0, 1))
    writer.close()
    here: List[Any] = []
    sender(writer, here)("run", points(0, 2))  # the socket is gone: the rank writes itself
    assert [metric.step for metric in here] == [0, 1] and store.calls == []


def test_a_rank_that_cannot_reach_the_writer_writes_itself(tmp_path: Any, capfd: pytest.CaptureFixture) -> None:
    here: List[Any] = []
    rank = RankSender(str(tmp_path / "no-socket"), "key", lambda run_id, metrics, now=True: here.extend(metrics))
    rank("run", points(0, 2))
    rank("run", points(2, 1))
    assert [metric.step for metric in here] == [0, 1, 2]
    assert capfd.readouterr().err.count("cannot be reached") == 1


def test_many_ranks_connecting_at_once_are_all_served(writer: MetricsWriter, store: Store) -> None:
    here: List[Any] = []
    ranks = [sender(writer, here) for _ in range(16)]
    threads = [threading.Thread(target=rank, args=("run", points(100 * r, 3), True)) for r, rank in enumerate(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert here == [] and len(store.steps) == 48  # none wrote its points itself


def test_close_returns_when_the_accepting_thread_has_already_ended(store: Store) -> None:
    """The race that hung CI once: the accepting thread saw the call end between a rank's connection and close()'s
    wake-up, and close() waited for ever for a handshake nobody would start."""
    writer = MetricsWriter("run", store.write, hold=60)
    real = writer._listener

    class LateListener:  # returns the rank's connection only once close() has begun: the thread then ends
        def accept(self) -> Any:
            connection = real.accept()
            while not writer._closed:
                time.sleep(0.01)
            return connection

        def close(self) -> None:
            real.close()

    writer._listener = LateListener()  # type: ignore[assignment]
    rank = Client(writer.address, family="AF_UNIX", authkey=writer.authkey.encode())  # connected, sends nothing
    closing = threading.Thread(target=writer.close, daemon=True)
    closing.start()
    closing.join(20)
    assert not closing.is_alive(), "close() waits for a handshake nobody starts"
    rank.close()


def test_a_batch_crosses_the_wire_as_it_was_sent() -> None:
    points = [("loss", 0.5, 1_700_000_000_000, 3), ("lr", 1e-3, 1_700_000_000_001, 3)]
    assert wire.decode(wire.encode("run-1", points, True)) == ("run-1", points, True)
