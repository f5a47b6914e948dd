"""The stall rule (pure): ranks waiting in one collective for too long while another has not reached it."""

from __future__ import annotations

from typing import Optional

from databricks.air._engine.snapshot import Collective, GroupPosition
from databricks.air._engine.stall_watch import RankPosition, StallWatch


def _group(enqueued: int, completed: int, since: float = 0.0, group: str = "0") -> GroupPosition:
    active = [Collective(enqueued, "all_reduce", [[4]], since)] if enqueued > completed else []
    return GroupPosition(group, "default_pg" if group == "0" else "undefined", enqueued, completed, active)


def _at(rank: int, enqueued: int, completed: int, since: float = 0.0, ended: bool = False) -> RankPosition:
    return RankPosition(rank, ended=ended, groups=[_group(enqueued, completed, since)])


def test_a_stall_is_reported_once_after_the_window() -> None:
    watch = StallWatch(stall_seconds=60)
    positions = [_at(0, 4, 3, since=1000.0), _at(1, 3, 3)]
    assert watch.observe(positions, now=1059.0) is None  # not yet
    stall = watch.observe(positions, now=1061.0)
    assert stall is not None and (stall.seq, stall.waiting, stall.behind) == (4, (0,), (1,))
    assert (
        stall.describe() == "rank 0 has waited 61 s in all_reduce #4 of the default group, which rank 1 has not reached"
    )
    assert watch.observe(positions, now=1200.0) is None  # once per stall
    later = watch.observe([_at(0, 9, 8, since=2000.0), _at(1, 8, 8)], now=2100.0)
    assert later is not None and later.seq == 9  # a new stall is a new report


def test_every_rank_waiting_in_the_same_collective_is_no_stall() -> None:
    watch = StallWatch(stall_seconds=10)
    assert watch.observe([_at(0, 4, 3, since=0.0), _at(1, 4, 3, since=0.0)], now=1000.0) is None


def test_work_outside_collectives_is_no_stall() -> None:
    watch = StallWatch(stall_seconds=10)  # every rank writing a checkpoint, or loading data, for a long time
    assert watch.observe([_at(0, 3, 3), _at(1, 3, 3)], now=1e9) is None


def test_a_rank_that_ended_or_does_not_answer_or_has_no_group_has_not_reached_it() -> None:
    for other in (
        RankPosition(1, ended=True),
        RankPosition(1, groups=None),
        RankPosition(1, groups=[]),
        RankPosition(1, groups=[_group(7, 7, group="1")]),
    ):
        stall: Optional[object] = StallWatch(stall_seconds=5).observe([_at(0, 2, 1, since=0.0), other], now=10.0)
        assert stall is not None and stall.behind == (1,), other


def test_zero_turns_it_off() -> None:
    assert StallWatch(stall_seconds=0).observe([_at(0, 4, 3, since=0.0), _at(1, 3, 3)], now=1e9) is None
