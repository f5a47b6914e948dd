"""The stopping rules of :class:`RankSupervisor`, over fake ranks on a fake clock: no processes, no waiting."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import pytest

from databricks.air._engine.supervision import POLL_SECONDS, RankSupervisor


class FakeRanks:
    """Ranks that run until ``ends_at`` (a time on the fake clock), or until a signal they obey ends them.

    ``receive(seconds)`` moves the clock on by ``seconds``, then plays what ``events`` scripted for that moment:
    ``"fail"`` (a rank failed: the supervisor is told to stop) or ``"interrupt"`` (``KeyboardInterrupt``).
    """

    def __init__(
        self,
        ends_at: Optional[float] = None,
        obey_sigterm: bool = True,
        events: Optional[Dict[float, str]] = None,
    ) -> None:
        self.now = 0.0
        self.ends_at = ends_at
        self.obey_sigterm = obey_sigterm
        self.events = dict(events or {})
        self.ended = False
        self.waits: List[float] = []
        self.signals: List[Tuple[float, str]] = []  # (time, "SIGTERM" | "SIGKILL")
        self.supervisor: Optional[RankSupervisor] = None

    def make_supervisor(self, grace_period: float) -> RankSupervisor:
        self.supervisor = RankSupervisor(
            receive=self.receive,
            running=lambda: not self.ended,
            terminate=self.terminate,
            kill=self.kill,
            grace_period=grace_period,
            clock=lambda: self.now,
        )
        return self.supervisor

    def receive(self, seconds: float) -> None:
        assert len(self.waits) < 1000, "supervision never ends"
        self.waits.append(seconds)
        self.now = round(self.now + seconds, 9)
        if self.ends_at is not None and self.now >= self.ends_at:
            self.ended = True
        event = self.events.pop(self.now, None)
        if event == "fail":
            assert self.supervisor is not None
            self.supervisor.stop()
        elif event == "interrupt":
            raise KeyboardInterrupt

    def terminate(self) -> None:
        self.signals.append((self.now, "SIGTERM"))
        if self.obey_sigterm:
            self.ends_at = self.now + 0.1  # ranks take a moment to wind down

    def kill(self) -> None:
        self.signals.append((self.now, "SIGKILL"))
        self.ended = True


def run(ranks: FakeRanks, deadline: Optional[float] = None, grace_period: float = 3.0) -> RankSupervisor:
    supervisor = ranks.make_supervisor(grace_period)
    supervisor.run(deadline)
    return supervisor


# --- ranks that end on their own ----------------------------------------------------------------------------------


def test_ranks_that_end_on_their_own_are_waited_for_in_polls_and_never_signalled() -> None:
    ranks = FakeRanks(ends_at=1.2)
    supervisor = run(ranks)
    assert ranks.waits == pytest.approx([POLL_SECONDS] * 3)
    assert ranks.signals == []
    assert not (supervisor.timed_out or supervisor.interrupted or supervisor.killed)
    assert supervisor.stopping_since is None


# --- the deadline ---------------------------------------------------------------------------------------------------


def test_the_deadline_stops_every_rank_when_it_is_reached_not_a_poll_later() -> None:
    ranks = FakeRanks()
    supervisor = run(ranks, deadline=1.2)
    # The last wait is cut short so that stopping begins at the deadline itself.
    assert ranks.waits[:3] == pytest.approx([0.5, 0.5, 0.2])
    assert ranks.signals == [(pytest.approx(1.2), "SIGTERM")]
    assert supervisor.timed_out and not supervisor.interrupted and not supervisor.killed
    assert supervisor.stopping_since == pytest.approx(1.2)


def test_a_deadline_already_past_stops_the_ranks_after_a_wait_of_zero() -> None:
    ranks = FakeRanks()
    supervisor = run(ranks, deadline=-1.0)
    assert ranks.waits[0] == 0.0
    assert ranks.signals[0] == (0.0, "SIGTERM")
    assert supervisor.timed_out


def test_ranks_that_end_before_the_deadline_are_not_timed_out() -> None:
    ranks = FakeRanks(ends_at=1.0)
    supervisor = run(ranks, deadline=1.2)
    assert ranks.signals == [] and not supervisor.timed_out


def test_ranks_that_ignore_sigterm_after_the_deadline_are_killed_after_the_grace_period() -> None:
    ranks = FakeRanks(obey_sigterm=False)
    supervisor = run(ranks, deadline=1.0, grace_period=1.2)
    assert ranks.signals == [(1.0, "SIGTERM"), (pytest.approx(2.2), "SIGKILL")]
    assert supervisor.timed_out and supervisor.killed


# --- a failure ------------------------------------------------------------------------------------------------------


def test_a_failure_starts_stopping_and_ranks_that_obey_are_not_killed() -> None:
    ranks = FakeRanks(events={0.5: "fail"})
    supervisor = run(ranks, grace_period=3.0)
    assert ranks.signals == [(0.5, "SIGTERM")]
    assert not supervisor.killed and not supervisor.timed_out and not supervisor.interrupted


def test_a_failure_then_kill_when_the_grace_period_is_over_to_the_poll() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={0.5: "fail"})
    supervisor = run(ranks, deadline=0.7, grace_period=1.2)
    # Once stopping, the deadline no longer cuts the waits (it would have cut the second one to 0.2), the grace
    # period does (the last one), and reaching the deadline while stopping is not a timeout.
    assert ranks.waits == pytest.approx([0.5, 0.5, 0.5, 0.2])
    assert ranks.signals == [(0.5, "SIGTERM"), (pytest.approx(1.7), "SIGKILL")]
    assert supervisor.killed and not supervisor.timed_out


def test_later_failures_neither_signal_again_nor_restart_the_grace_period() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={0.5: "fail", 1.0: "fail", 1.5: "fail"})
    run(ranks, grace_period=1.2)
    assert ranks.signals == [(0.5, "SIGTERM"), (pytest.approx(1.7), "SIGKILL")]


def test_no_grace_period_kills_in_the_same_round_as_the_failure() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={0.5: "fail"})
    run(ranks, grace_period=0.0)
    assert ranks.signals == [(0.5, "SIGTERM"), (0.5, "SIGKILL")]
    assert len(ranks.waits) == 1


# --- interrupts -----------------------------------------------------------------------------------------------------


def test_a_first_interrupt_stops_every_rank_gracefully_and_supervision_goes_on() -> None:
    ranks = FakeRanks(events={1.0: "interrupt"})
    supervisor = run(ranks, deadline=10.0)  # returns: the caller raises KeyboardInterrupt again, from `interrupted`
    assert ranks.signals == [(1.0, "SIGTERM")]
    assert supervisor.interrupted and not supervisor.killed and not supervisor.timed_out
    assert ranks.ended


def test_after_a_first_interrupt_ranks_that_ignore_sigterm_are_killed_after_the_grace_period() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={1.0: "interrupt"})
    supervisor = run(ranks, grace_period=1.2)
    assert ranks.signals == [(1.0, "SIGTERM"), (pytest.approx(2.2), "SIGKILL")]
    assert supervisor.interrupted and supervisor.killed


def test_a_second_interrupt_kills_at_once_without_waiting_out_the_grace_period() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={1.0: "interrupt", 1.5: "interrupt"})
    supervisor = run(ranks, grace_period=3.0)
    assert ranks.signals == [(1.0, "SIGTERM"), (1.5, "SIGKILL")]
    assert supervisor.interrupted and supervisor.killed


def test_an_interrupt_while_a_failure_is_stopping_the_ranks_kills_at_once() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={0.5: "fail", 1.0: "interrupt"})
    supervisor = run(ranks, grace_period=3.0)
    assert ranks.signals == [(0.5, "SIGTERM"), (1.0, "SIGKILL")]
    assert supervisor.interrupted and supervisor.killed


def test_an_interrupt_after_the_deadline_kills_at_once_and_counts_as_both() -> None:
    ranks = FakeRanks(obey_sigterm=False, events={1.5: "interrupt"})
    supervisor = run(ranks, deadline=1.0, grace_period=3.0)
    assert ranks.signals == [(1.0, "SIGTERM"), (1.5, "SIGKILL")]
    assert supervisor.timed_out and supervisor.interrupted


def test_an_interrupt_while_the_ranks_are_told_to_stop_counts_as_a_second_one() -> None:
    """Stopping is marked before the ranks are signalled, so an interrupt landing there kills at once."""
    ranks = FakeRanks(obey_sigterm=False, events={0.5: "fail"})
    terminations: List[float] = []

    def interrupted_terminate() -> None:
        terminations.append(ranks.now)
        raise KeyboardInterrupt

    supervisor = RankSupervisor(
        receive=ranks.receive,
        running=lambda: not ranks.ended,
        terminate=interrupted_terminate,
        kill=ranks.kill,
        grace_period=3.0,
        clock=lambda: ranks.now,
    )
    ranks.supervisor = supervisor
    supervisor.run(None)
    assert terminations == [0.5]
    assert ranks.signals == [(0.5, "SIGKILL")]
    assert supervisor.interrupted and supervisor.killed and supervisor.stopping_since == 0.5
