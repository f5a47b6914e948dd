"""The pool of warm rank servers: it never lends a server whose last request went unanswered, lends each server to
one call at a time, keeps as many warm as calls ran at once lately, and lets the extra ones go when unused."""

from __future__ import annotations

import os
import threading
import time
from typing import List

import psutil
import pytest

from databricks.air import distributed
from databricks.air._engine import rank_server_handle
from databricks.air._engine.rank_server_handle import RankServerHandle
from process_helpers import server_descendants, wait_until


def test_a_server_interrupted_while_answering_is_closed_not_lent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # An interrupt while a request waits for its answer leaves that answer in the socket: the next call's first
    # request would read it as its own ("the rank server could not start the ranks").
    environ = dict(os.environ)
    handle = rank_server_handle.pool.acquire(environ)
    handle.wait_ready()
    assert not handle.unsettled

    def interrupted() -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(handle, "receive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        handle.request({"op": "adopt", "call_dir": "/nonexistent/databricks-air-call"})  # no answer comes
    assert handle.unsettled
    rank_server_handle.pool.release(handle)
    assert handle.process.wait(30) is not None  # closed: the server exits
    again = rank_server_handle.pool.acquire(environ)
    assert again is not handle
    rank_server_handle.pool.release(again)


# --- calls at once ------------------------------------------------------------------------------------------------
# Every server below is a real interpreter importing torch (seconds each on a small machine); a test closes what it
# started. "Started" is counted by the pool and by the servers' pids, never by timing.


def acquire_at_once(pool: "rank_server_handle._Pool", environ: dict, count: int) -> List[RankServerHandle]:
    """``count`` threads acquire a server at the same moment."""
    barrier = threading.Barrier(count)
    handles: List[RankServerHandle] = []

    def acquire() -> None:
        barrier.wait()
        handles.append(pool.acquire(environ))

    threads = [threading.Thread(target=acquire) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(handles) == count
    return handles


def release_all(pool: "rank_server_handle._Pool", handles: List[RankServerHandle]) -> None:
    for handle in handles:
        pool.release(handle)


def all_gone(handles: List[RankServerHandle]) -> bool:
    return all(handle.process.poll() is not None for handle in handles)


@pytest.mark.slow
def test_calls_at_once_get_servers_of_their_own_and_the_next_round_finds_them_all_warm() -> None:
    pool = rank_server_handle._Pool()
    environ = dict(os.environ)
    try:
        first = acquire_at_once(pool, environ, 4)
        assert len({id(handle) for handle in first}) == 4  # never one server to two calls
        assert len({handle.process.pid for handle in first}) == 4
        assert pool.servers_started == 4
        for handle in first:
            handle.wait_ready()
        release_all(pool, first)

        second = acquire_at_once(pool, environ, 4)
        assert {handle.process.pid for handle in second} == {handle.process.pid for handle in first}
        assert len({id(handle) for handle in second}) == 4
        assert pool.servers_started == 4  # no cold start
        release_all(pool, second)
    finally:
        pool.close_all()
    assert all_gone(first)


@pytest.mark.slow
def test_extra_idle_servers_expire_the_baseline_stays_and_a_lost_one_is_replaced_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = rank_server_handle._Pool()
    environ = dict(os.environ)
    try:
        first = acquire_at_once(pool, environ, 3)
        for handle in first:
            handle.wait_ready()
        release_all(pool, first)
        assert pool.servers_started == 3

        # One idle server dies. The next round of 3: the call that takes the last idle server (while 3 ran at once a
        # moment ago) starts a spare, which the third call takes instead of starting its own.
        lost = first[-1]  # released last: lent first
        lost.process.kill()
        lost.process.wait(30)
        second = [pool.acquire(environ) for _ in range(3)]
        assert lost not in second
        assert len({id(handle) for handle in second}) == 3
        assert pool.servers_started == 4
        assert {handle.process.pid for handle in second[:2]} == {handle.process.pid for handle in first[:2]}

        # Idle beyond the baseline (KEEP_IDLE, the most recently used) for the expiry: closed.
        assert rank_server_handle.KEEP_IDLE == 2
        monkeypatch.setattr(rank_server_handle, "IDLE_EXPIRY_SECONDS", 0.5)
        release_all(pool, second)  # second[0] has waited longest: it expires, the other two stay
        assert wait_until(lambda: second[0].process.poll() is not None, timeout=30)
        time.sleep(1.5)  # three expiry periods: the baseline is kept however long it waits
        assert all(handle.alive() for handle in second[1:])
        assert wait_until(lambda: pool._expiry is None, timeout=10)  # the expiry thread ends with nothing to watch
        assert len(pool._idle[rank_server_handle.startup_fingerprint(environ)]) == 2
    finally:
        pool.close_all()
    assert all_gone(first + second)


@pytest.mark.slow
def test_nothing_is_left_running_after_close_all() -> None:
    pool = rank_server_handle._Pool()
    environ = dict(os.environ)
    handles = acquire_at_once(pool, environ, 3)
    release_all(pool, handles)
    assert pool._expiry is not None  # three idle, one beyond the baseline: the expiry thread watches it
    pool.close_all()
    assert all_gone(handles)
    assert not {handle.process.pid for handle in handles} & {child.pid for child in psutil.Process().children()}
    assert wait_until(lambda: pool._expiry is None, timeout=10)


class FakeServer:
    """A handle without a process, to hammer the pool's bookkeeping from many threads."""

    def __init__(self, environ: dict) -> None:
        self.fingerprint = rank_server_handle.startup_fingerprint(environ)
        self.unsettled = False
        self.closed = False
        self.user: object = None

    def alive(self) -> bool:
        return not self.closed

    def close(self, wait: bool = True) -> None:
        self.closed = True


def test_many_threads_acquiring_and_releasing_never_share_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_server_handle, "RankServerHandle", FakeServer)
    pool = rank_server_handle._Pool()
    environ = dict(os.environ)
    shared: List[str] = []
    barrier = threading.Barrier(12)

    def calls() -> None:
        me = object()
        barrier.wait()
        for index in range(300):
            if index % 50 == 0:
                pool.prewarm(environ)
            handle = pool.acquire(environ)
            if handle.user is not None or handle.closed:
                shared.append(f"{handle!r} lent while in use or closed")
            handle.user = me
            time.sleep(0)
            if handle.user is not me:
                shared.append(f"{handle!r} lent to two calls")
            handle.user = None
            pool.release(handle)

    threads = [threading.Thread(target=calls) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert shared == []
    key = rank_server_handle.startup_fingerprint(environ)
    assert pool._lent_count[key] == 0 and not pool._lent
    assert 0 < len(pool._idle[key]) <= rank_server_handle.MAX_IDLE
    pool.close_all()


def parent_pid() -> int:
    import os
    import time

    time.sleep(1.0)  # the four calls of a round overlap
    return os.getppid()  # the rank server that forked this rank


@pytest.mark.slow
def test_a_second_round_of_four_calls_at_once_starts_no_rank_server() -> None:
    fn = distributed(accelerator_type="CPU", num_accelerators=1, timeout=180)(parent_pid)
    pool = rank_server_handle.pool

    def round_of_four() -> List[int]:
        barrier = threading.Barrier(4)
        servers: List[int] = []

        def call() -> None:
            barrier.wait()
            servers.extend(fn.distributed())

        threads = [threading.Thread(target=call) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        assert len(servers) == 4
        return servers

    try:
        first = round_of_four()
        assert len(set(first)) == 4
        started = pool.servers_started
        second = round_of_four()
        assert pool.servers_started == started
        assert sorted(second) == sorted(first)  # the same four servers, one call each
    finally:
        pool.close_all()  # four idle servers would hold torch for minutes, beside later tests
    assert not set(first) & {child.pid for child in psutil.Process().children()}
    assert server_descendants() == []
