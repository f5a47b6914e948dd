"""The contract every call follows (``_engine/call.py``), over a scripted implementation: no processes.

Real ranks go through the same flow in ``test_run.py``, ``test_failures.py``, ``test_lifecycle.py`` (local) and
``tests/ray/`` (Ray).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from databricks.air._engine import launch as engine
from databricks.air._engine.call import Call, Launch
from databricks.air._engine.local_call import LocalCall
from databricks.air._engine.outcome import OutcomeKind, RankOutcome, RankRecord
from databricks.air._engine.supervision import StopReason
from databricks.air.exceptions import LocalExecutionTimeoutError


class ScriptedCall(Call):
    """Ranks that end after a number of polls, as scripted; a rank that obeys SIGTERM ends at the next poll."""

    def __init__(self, launch: Launch, ends: Dict[int, Tuple[Optional[int], RankRecord]], obey: bool = True) -> None:
        super().__init__(launch)
        self.ends = ends  # rank -> (polls until it ends, or None: never on its own; its record)
        self.obey = obey
        self.polls = 0
        self.sent: List[Tuple[str, List[int], Optional[StopReason]]] = []
        self.closed = 0
        self.pending: Dict[int, Tuple[int, Optional[RankRecord]]] = {}  # rank -> (status, record) at the next poll

    def start(self, deadline: Optional[float]) -> None:
        self.open_outputs(len(self.ends))
        for rank in self.ends:
            self.outcomes[rank] = RankOutcome(rank=rank, pid=1000 + rank, log_path=self.outputs[rank].log_path)

    def poll(self, seconds: float) -> None:
        self.polls += 1
        time.sleep(min(seconds, 0.005))
        for rank, (status, record) in list(self.pending.items()):
            del self.pending[rank]
            if self.outcomes[rank].running:  # a signal to a process that has ended does nothing
                self.record_exit(rank, status, record)
        for rank, (after, record) in self.ends.items():
            if after == self.polls and self.outcomes[rank].running:
                self.record_exit(rank, 0 if record.kind is OutcomeKind.RETURNED else 1, record)

    def send(self, sig: int, ranks: Sequence[RankOutcome]) -> None:
        assert self.supervisor is not None  # ranks are signalled while they are supervised
        self.sent.append((signal.Signals(sig).name, [o.rank for o in ranks], self.supervisor.stop_reason))
        if sig == signal.SIGKILL or self.obey:
            for outcome in ranks:
                self.pending[outcome.rank] = (-sig, None)

    def close(self) -> None:
        self.closed += 1
        self.close_outputs()


def make_launch(tmp_path: Path, **changes: object) -> Launch:
    settings = dict(
        name="f",
        world_size=2,
        function=b"",
        arguments=b"",
        environ={},
        cwd=str(tmp_path),
        sys_path=[],
        argv=[],
        log_dir=str(tmp_path),
        grace_period=0.05,
    )
    settings.update(changes)
    return Launch(**settings)  # type: ignore[arg-type]


def failure(message: str) -> RankRecord:
    try:
        raise ValueError(message)
    except ValueError as error:
        return RankRecord.failed(OutcomeKind.RAISED, error)


def test_ranks_that_return_give_their_values_in_rank_order_and_are_never_signalled(tmp_path: Path) -> None:
    call = ScriptedCall(make_launch(tmp_path), {1: (1, RankRecord.returned("b")), 0: (3, RankRecord.returned("a"))})
    assert call.run() == ["a", "b"]
    assert call.sent == [] and call.closed == 1
    assert call.stop_reason is None


def test_the_first_failure_stops_the_others_with_grace_and_names_its_reason(tmp_path: Path) -> None:
    call = ScriptedCall(make_launch(tmp_path), {0: (None, RankRecord.returned("never")), 1: (2, failure("boom"))})
    with pytest.raises(ValueError, match="boom"):
        call.run()
    # Only the rank still running is stopped, and the reason is known while it is being stopped.
    assert call.sent == [("SIGTERM", [0], StopReason.FAILURE)]
    assert call.outcomes[0].stopped_by_launcher and call.outcomes[0].kind is OutcomeKind.DIED
    assert call.outcomes[1].kind is OutcomeKind.RAISED and not call.outcomes[1].stopped_by_launcher
    assert call.closed == 1


def test_ranks_that_ignore_sigterm_are_killed_after_the_grace_period(tmp_path: Path) -> None:
    call = ScriptedCall(
        make_launch(tmp_path), {0: (None, RankRecord.returned("never")), 1: (1, failure("boom"))}, obey=False
    )
    with pytest.raises(ValueError):
        call.run()
    assert [(name, ranks) for name, ranks, _ in call.sent] == [("SIGTERM", [0]), ("SIGKILL", [0])]
    assert call.outcomes[0].status == -signal.SIGKILL


def test_the_timeout_stops_every_rank_and_is_the_calls_error(tmp_path: Path) -> None:
    call = ScriptedCall(
        make_launch(tmp_path, timeout=0.05, timeout_note="Raise it. "),
        {0: (None, RankRecord.returned("a")), 1: (None, RankRecord.returned("b"))},
    )
    with pytest.raises(LocalExecutionTimeoutError, match="timeout of 0.05 s, so all 2 ranks were stopped. Raise it."):
        call.run()
    assert call.sent == [("SIGTERM", [0, 1], StopReason.TIMEOUT)]
    assert call.stop_reason is StopReason.TIMEOUT


def test_a_start_that_fails_is_closed_all_the_same(tmp_path: Path) -> None:
    class FailingStart(ScriptedCall):
        def start(self, deadline: Optional[float]) -> None:
            super().start(deadline)
            raise ConnectionError("no cluster")

    call = FailingStart(make_launch(tmp_path), {0: (1, RankRecord.returned("a"))})
    with pytest.raises(ConnectionError):
        call.run()
    assert call.closed == 1 and call.sent == []


def test_where_ranks_run_is_chosen_in_one_place() -> None:
    from databricks.air._ray.ray_call import RayCall

    assert engine.call_class(remote=False) is LocalCall
    assert engine.call_class(remote=True) is RayCall
    assert issubclass(RayCall, Call) and issubclass(LocalCall, Call)
    assert LocalCall.runs_here and not RayCall.runs_here


def test_the_launcher_asks_the_chosen_call_and_never_branches_on_remote() -> None:
    """What differs between ranks here and on Ray (GPU leases, the metrics writer, this machine's metrics) is asked
    of the chosen ``Call``; ``remote=`` only chooses it (and, at decoration, how the settings are resolved)."""
    import ast
    import inspect

    from databricks.air import launcher

    tree = ast.parse(inspect.getsource(launcher))
    branches = [  # `if not self.remote:`, `... if self.remote else ...`
        f"launcher.py:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.If, ast.IfExp))
        and any(isinstance(name, ast.Attribute) and name.attr == "remote" for name in ast.walk(node.test))
    ]
    assert branches == []


def test_a_rank_that_fails_while_an_interrupt_looks_at_the_ranks_leaves_it_an_interrupt(tmp_path: Path) -> None:
    # Seen in CI: Ctrl-C, then, during the seconds the look at the ranks takes, a rank lost its peer and raised. The
    # call must still end in KeyboardInterrupt, not in that rank's "Connection closed by peer".
    class Interrupted(ScriptedCall):
        def poll(self, seconds: float) -> None:
            super().poll(seconds)
            if self.polls == 2:
                raise KeyboardInterrupt

        def snapshot(self, ranks: Sequence[RankOutcome], budget: float) -> dict:
            self.record_exit(0, 1, failure("Connection closed by peer"))  # rank 0 fails while it is looked at
            return {}

    call = Interrupted(
        make_launch(tmp_path), {0: (None, RankRecord.returned("a")), 1: (None, RankRecord.returned("b"))}
    )
    with pytest.raises(KeyboardInterrupt):
        call.run()
    assert call.stop_reason is StopReason.INTERRUPT
    assert not call.outcomes[0].failed_on_its_own and call.outcomes[0].stopped_by_launcher
