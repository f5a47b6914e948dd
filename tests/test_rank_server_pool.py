"""The pool of warm rank servers never lends a server whose last request went unanswered."""

from __future__ import annotations

import os

import pytest

from databricks.air._engine import rank_server_handle


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
