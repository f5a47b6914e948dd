"""The remote call's supervision loop against a scripted stand-in for Ray: an interrupt may land anywhere in it."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from databricks.air._engine.launch import Launch
from databricks.air._engine.outcome import RankOutcome
from databricks.air._engine.output import make_outputs
from databricks.air._ray.rank_layout import Slot, arrange
from databricks.air._ray.ray_call import RayCall
from databricks.air.compute import AcceleratorType


class _Method:
    def __init__(self, call: Any) -> None:
        self.remote = call


class FakeHost:
    """A rank host whose rank runs until it is signalled, then reports that signal as its exit status."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.signalled: List[int] = []
        self.poll = _Method(lambda wait: ("poll", self))
        self.stop = _Method(lambda sig: self.signalled.append(sig))
        self.close = _Method(lambda: ("close", self))

    def report(self) -> Dict[str, Any]:
        status = -self.signalled[0] if self.signalled else None
        return {"output": [("stdout", f"rank {self.rank}\n".encode())], "status": status, "result": None}


class FakeRay:
    """``wait``, ``get`` and ``kill`` as a remote call uses them; ``get`` raises ``KeyboardInterrupt`` once."""

    class exceptions:
        RayError = RuntimeError

    def __init__(self) -> None:
        self.interrupt_next_get = True
        self.killed: List[FakeHost] = []

    def wait(self, refs: List[Tuple[str, FakeHost]], num_returns: int, timeout: float) -> Tuple[list, list]:
        assert refs, "a rank still runs, but nothing polls it: the call would wait forever"
        return list(refs)[:num_returns], list(refs)[num_returns:]

    def get(self, ref: Tuple[str, FakeHost]) -> Dict[str, Any]:
        if self.interrupt_next_get:
            self.interrupt_next_get = False
            raise KeyboardInterrupt  # after the caller took this poll, before it handled the answer
        return ref[1].report()

    def kill(self, host: FakeHost, no_restart: bool = True) -> None:
        self.killed.append(host)


def test_an_interrupt_between_taking_and_handling_a_poll_loses_no_rank(tmp_path: Path) -> None:
    launch = Launch(
        name="f",
        world_size=2,
        function=b"",
        arguments=b"",
        environ={},
        cwd=str(tmp_path),
        sys_path=[],
        argv=[],
        log_dir=str(tmp_path),
        grace_period=5.0,
        accelerator_type=AcceleratorType.CPU,
    )
    call = RayCall(launch)
    fake = FakeRay()
    call.ray = fake
    call.hosts = [FakeHost(0), FakeHost(1)]
    call.places = arrange([Slot("a", "127.0.0.1"), Slot("a", "127.0.0.1")])
    call.outputs = make_outputs(str(tmp_path), 2, show_all_ranks=False)
    call.outcomes = {r: RankOutcome(rank=r, pid=100 + r, log_path=call.outputs[r].log_path) for r in (0, 1)}
    try:
        call.supervise(deadline=None)
        assert [host.signalled for host in call.hosts] == [[signal.SIGTERM], [signal.SIGTERM]]
        assert [call.outcomes[r].status for r in (0, 1)] == [-signal.SIGTERM, -signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            call.results()
    finally:
        call.close()
    assert fake.killed == call.hosts
    assert "rank 1" in (tmp_path / "rank_1.txt").read_text()
