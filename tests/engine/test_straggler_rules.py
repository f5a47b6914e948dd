"""The straggler arithmetic (pure): who issued each collective last, how late, how often; when a rank is named, and
when it no longer is. Also the stall watch's rule for ranks that diverged."""

from __future__ import annotations

import random
from typing import Dict, List, Optional, Sequence

import pytest

from databricks.air._engine import stragglers
from databricks.air._engine.snapshot import Collective, GroupPosition
from databricks.air._engine.stall_watch import RankPosition, StallWatch
from databricks.air._engine.stragglers import DataWait, Issued, Judge, Straggler, window


def _steps(
    count: int,
    step: float,
    late: Dict[int, float],
    ranks: int = 2,
    jitter: float = 0.0,
    seed: int = 0,
    first: int = 1,
    group: str = "0",
    op: str = "all_reduce",
) -> List[Issued]:
    """``count`` collectives, one per step of ``step`` seconds; rank r issues each ``late[r]`` after the step begins
    (plus up to ``jitter`` of the step, at random)."""
    chance = random.Random(seed)
    issued = []
    for index in range(count):
        begin = 1000.0 + index * step
        times = {rank: begin + late.get(rank, 0.0) + chance.uniform(0, jitter * step) for rank in range(ranks)}
        issued.append(Issued(group, first + index, op, times))
    return issued


def test_the_rank_that_issues_last_is_last_and_late_by_its_delay() -> None:
    seen = window(1, _steps(50, 0.25, {1: 0.2}), {}, {})
    rank0, rank1 = seen.ranks[0], seen.ranks[1]
    assert (rank1.last, rank1.collectives, rank0.last) == (50, 50, 0)
    assert rank1.late_seconds == pytest.approx(0.2) and rank0.late_seconds == 0.0
    assert seen.op == "all_reduce" and seen.collectives == 50
    assert seen.median_interval == pytest.approx(0.25)
    assert seen.rates["0"] == pytest.approx(50 / (49 * 0.25 + 0.2), rel=1e-6)
    # rank 0 waits from its own issue to rank 1's, every step: 0.2 s of each 0.25 s
    assert rank1.wait_share == pytest.approx(50 * 0.2 / (49 * 0.25 + 0.2), rel=1e-6)
    assert seen.metrics() == {
        "collectives_per_second": seen.rates["0"],
        "straggler/late_seconds/rank_0": 0.0,
        "straggler/last_fraction/rank_0": 0.0,
        "straggler/late_seconds/rank_1": rank1.late_seconds,
        "straggler/last_fraction/rank_1": 1.0,
    }


def test_lateness_is_measured_from_the_next_latest_rank() -> None:
    seen = window(1, _steps(20, 1.0, {1: 0.1, 2: 0.5, 3: 0.2}, ranks=4), {}, {})
    assert seen.ranks[2].last == 20 and seen.ranks[2].late_seconds == pytest.approx(0.3)


def test_a_straggler_is_named_once_and_its_end_said_once() -> None:
    judge = Judge()
    slow = window(1, _steps(40, 0.25, {1: 0.2}), {}, {})
    verdict = judge.decide(slow)
    assert verdict.named is not None and verdict.named.rank == 1 and verdict.ended is None
    assert judge.decide(window(2, _steps(40, 0.25, {1: 0.2}, first=41), {}, {})) == stragglers.Verdict()
    recovered = window(3, _steps(40, 0.05, {}, jitter=0.2, first=81), {}, {})
    assert judge.decide(recovered) == stragglers.Verdict(ended=1)
    assert judge.decide(window(4, _steps(40, 0.05, {}, jitter=0.2, first=121, seed=1), {}, {})) == stragglers.Verdict()


def test_another_rank_taking_over_ends_the_first_and_names_the_second() -> None:
    judge = Judge()
    judge.decide(window(1, _steps(40, 0.25, {1: 0.2}, ranks=3), {}, {}))
    verdict = judge.decide(window(2, _steps(40, 0.25, {2: 0.2}, ranks=3, first=41), {}, {}))
    assert verdict.ended == 1 and verdict.named is not None and verdict.named.rank == 2


@pytest.mark.parametrize("case", ["balanced", "jitter", "few", "tiny lateness", "rarely last"])
def test_nothing_is_named(case: str) -> None:
    issued = {
        "balanced": _steps(200, 0.02, {}),
        "jitter": _steps(200, 0.25, {}, jitter=0.4),  # each rank's step varies by +-20 %
        "few": _steps(stragglers.MIN_COLLECTIVES - 1, 0.25, {1: 0.2}),
        "tiny lateness": _steps(200, 0.1, {1: 0.003}),  # always last, by 3 ms: below the floor
        "rarely last": _steps(100, 0.25, {1: 0.2})[:60] + _steps(100, 0.25, {0: 0.2}, first=101)[:40],
    }[case]
    assert Judge().decide(window(1, issued, {}, {})).named is None


def test_a_long_step_raises_the_bar() -> None:
    # 60 ms late into a collective issued every 2 s is 3 % of the interval: not a straggler's share
    assert Judge().decide(window(1, _steps(40, 2.0, {1: 0.06}), {}, {})).named is None
    assert Judge().decide(window(1, _steps(40, 0.3, {1: 0.06}), {}, {})).named is not None


def test_data_or_compute() -> None:
    before = {0: DataWait(1.0, 10), 1: DataWait(1.0, 10)}
    slow_data = {0: DataWait(1.5, 60), 1: DataWait(11.0, 60)}  # rank 1 waited 0.2 s a batch, rank 0 0.01 s
    seen = window(1, _steps(50, 0.25, {1: 0.2}), before, slow_data)
    assert seen.ranks[1].data_wait_per_step == pytest.approx(0.2)
    assert stragglers.cause(seen.ranks[1], [seen.ranks[0]]) == "waiting for data 0.20 s per step"
    computing = window(1, _steps(50, 0.25, {1: 0.2}), before, {0: DataWait(1.5, 60), 1: DataWait(1.6, 60)})
    assert stragglers.cause(computing.ranks[1], [computing.ranks[0]]) == "computing (it waits for data 0.01 s per step)"
    no_loader = window(1, _steps(50, 0.25, {1: 0.2}), {}, {0: None, 1: DataWait(0.0, 0)})
    assert stragglers.cause(no_loader.ranks[1], [no_loader.ranks[0]]) == "not in our DataLoader"


def test_the_warning_and_the_closing_clause() -> None:
    named = Straggler(
        rank=1,
        op="all_reduce",
        collectives=412,
        last_fraction=0.96,
        late_seconds=0.21,
        wait_share=0.38,
        where="train.py:41 (dataloader next)",
        cause="waiting for data 0.19 s per step",
    )
    assert named.describe() == (
        "rank 1 is a straggler: last into 96 % of 412 all_reduces, 0.21 s late (median); the others wait for it "
        "38 % of the time. Where it was: train.py:41 (dataloader next); waiting for data 0.19 s per step."
    )
    assert named.clause() == "rank 1 was a straggler (last into 96 % of all_reduces, 0.21 s late)"


def test_collectives_of_several_kinds_and_groups() -> None:
    issued = _steps(10, 0.25, {1: 0.2}) + _steps(10, 0.25, {1: 0.2}, group="1", op="broadcast")
    seen = window(1, issued, {}, {})
    assert seen.op == "collective" and set(seen.rates) == {"0", "1"}
    assert "collectives_per_second/group_1" in seen.metrics()


# --- the stall watch: ranks that diverged ---------------------------------------------------------------------------


def _waiting(rank: int, op: str, sizes: Sequence[object], since: float, seq: int = 2) -> RankPosition:
    group = GroupPosition("0", "default_pg", seq, seq - 1, [Collective(seq, op, list(sizes), since)])
    return RankPosition(rank, groups=[group])


def test_ranks_waiting_in_different_collectives_at_the_same_point_diverged() -> None:
    watch = StallWatch(stall_seconds=10)
    positions = [_waiting(0, "all_reduce", [[4]], since=100.0), _waiting(1, "barrier", [], since=101.0)]
    assert watch.observe(positions, now=110.5) is None  # rank 1 has waited 9.5 s only
    stall: Optional[object] = watch.observe(positions, now=111.0)
    assert stall is not None
    assert stall.describe() == (  # type: ignore[attr-defined]
        "ranks 0 and 1 have waited 11 s at collective #2 of the default group in different collectives: rank 0 in "
        "all_reduce [[4]], rank 1 in barrier []. They diverged: every rank must issue the same collectives, with the "
        "same shapes, in the same order"
    )
    assert watch.observe(positions, now=200.0) is None  # once


def test_the_same_collective_with_other_shapes_diverged_too() -> None:
    positions = [_waiting(0, "all_reduce", [[4]], since=0.0), _waiting(1, "all_reduce", [[8]], since=0.0)]
    stall = StallWatch(stall_seconds=5).observe(positions, now=6.0)
    assert stall is not None and stall.diverged == ((0, "all_reduce [[4]]"), (1, "all_reduce [[8]]"))
