"""The hang report from snapshots: one line per rank, then the suspect and why (pure, no processes)."""

from __future__ import annotations

from typing import List, Optional

import pytest

from databricks.air._engine.hang_report import RankView, build, is_user_file
from databricks.air._engine.snapshot import Collective, Frame, GroupPosition, RankSnapshot, ThreadStack

NOW = 1_000_000.0
TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def _snapshot(rank: int, frames: List[Frame], groups: Optional[List[GroupPosition]]) -> RankSnapshot:
    return RankSnapshot(
        rank,
        100 + rank,
        NOW,
        threads=[ThreadStack("MainThread", True, frames)],
        groups=groups,
        sources={"probe": "ok" if groups is not None else "no answer within 2.0 s", "stacks": "ok"},
    )


def _default(
    enqueued: int, completed: int, op: str = "all_reduce", sizes: Optional[list] = None, waited: float = 12.0
) -> GroupPosition:
    active = [Collective(enqueued, op, sizes or [[4]], NOW - waited)] if enqueued > completed else []
    return GroupPosition("0", "default_pg", enqueued, completed, active)


def _in_collective(line: int = 12) -> List[Frame]:
    return [
        Frame("/home/me/project/train.py", line, "train", "dist.all_reduce(t)"),
        Frame(TORCH, 3252, "all_reduce", "work.wait()"),
    ]


def _sleeping() -> List[Frame]:
    return [Frame("/home/me/project/train.py", 9, "train", "time.sleep(600)")]


def test_a_rank_behind_is_named_with_its_place_and_the_waiters_collective() -> None:
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(4, 3)])),
            RankView(1, snapshot=_snapshot(1, _sleeping(), [_default(3, 3)])),
        ],
        now=NOW,
    )
    assert report.suspects == [1]
    assert "rank 0: waiting in all_reduce #4 of the default group for 12 s" in report.table[0]
    assert report.table[0].endswith("/home/me/project/train.py:12: dist.all_reduce(t)")
    assert "rank 1: running its own code (3 collectives completed)" in report.table[1]
    assert report.verdict == (
        "Rank 1 is behind: it completed 3 collectives of the default group and is in time.sleep at "
        "/home/me/project/train.py:9, while rank 0 waits in all_reduce #4 of the default group for 12 s."
    )


def test_a_rank_that_ended_is_behind_forever() -> None:
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(2, 1)])),
            RankView(1, ended="exit code 1", raised="ValueError"),
        ],
        now=NOW,
    )
    assert report.suspects == [1]
    assert "rank 1: ended (exit code 1, raised ValueError)" in report.table[1]
    assert report.verdict.startswith("Rank 1 is behind: it ended (exit code 1), while rank 0 waits in all_reduce #2")


def test_mismatched_collectives_at_the_same_number_are_a_divergence() -> None:
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(5, 4, "all_reduce")])),
            RankView(1, snapshot=_snapshot(1, _in_collective(20), [_default(5, 4, "broadcast")])),
        ],
        now=NOW,
    )
    assert report.suspects == [0, 1]
    assert report.verdict.startswith("The ranks diverged at collective #5 of the default group: rank 0 in all_reduce")
    assert "rank 1 in broadcast" in report.verdict


def test_a_rank_that_never_called_init_process_group() -> None:
    rendezvous = [
        Frame("/home/me/project/train.py", 3, "train", 'dist.init_process_group("gloo")'),
        Frame(TORCH, 1700, "init_process_group", ""),
        Frame(TORCH, 200, "_store_based_barrier", ""),
    ]
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, rendezvous, [])),
            RankView(1, snapshot=_snapshot(1, _sleeping(), [])),
        ],
        now=NOW,
    )
    assert "rank 0: waiting in init_process_group (for the other ranks to join)" in report.table[0]
    assert report.suspects == [1]
    assert report.verdict.startswith(
        "Rank 1 never joined the process group: rank 1 is in time.sleep at /home/me/project/train.py:9"
    )


def test_every_rank_in_the_same_collective_blames_none() -> None:
    report = build([RankView(r, snapshot=_snapshot(r, _in_collective(), [_default(7, 6)])) for r in range(3)], now=NOW)
    assert report.suspects == []
    assert report.verdict.startswith("Every rank waits in all_reduce #7 of the default group, and no rank is behind")


def test_no_collective_at_all_says_each_rank_runs_its_own_code() -> None:
    report = build([RankView(r, snapshot=_snapshot(r, _sleeping(), [])) for r in range(2)], now=NOW)
    assert report.suspects == []
    assert report.verdict.startswith("No rank waits in a collective")
    assert "no collective yet" in report.table[0]


def test_a_rank_that_does_not_answer_its_probe_is_still_placed_by_its_stack() -> None:
    spinning = [
        Frame("/home/me/project/train.py", 13, "train", 're.match(r"(a+)+$", text)'),
        Frame("/usr/lib/python3.11/re/__init__.py", 166, "match", ""),
    ]
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(4, 3)])),
            RankView(1, snapshot=_snapshot(1, spinning, None)),
        ],
        now=NOW,
    )
    assert report.suspects == [1]
    assert "not answering its probe (holding the GIL?)" in report.table[1]
    assert "is in re.match at /home/me/project/train.py:13" in report.verdict


@pytest.mark.parametrize(
    "probe, stacks, said",
    [
        (
            "not listening (the rank had not started its function, or had ended)",
            "ok",
            "starting or ending (its probe was not listening)",
        ),
        ("the rank ended while it was asked", "ok", "ending (it exited while it was looked at)"),
        (
            "not listening (the rank had not started its function, or had ended)",
            "the rank had already exited",
            "ending (it exited while it was looked at)",
        ),
    ],
)
def test_a_probe_that_gave_nothing_is_not_taken_for_a_rank_holding_the_gil(probe: str, stacks: str, said: str) -> None:
    quiet = RankSnapshot(1, 101, NOW, threads=[], groups=None, sources={"probe": probe, "stacks": stacks})
    report = build(
        [RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(4, 3)])), RankView(1, snapshot=quiet)], now=NOW
    )
    assert said in report.table[1] and "GIL" not in report.table[1]


def test_user_files_are_neither_libraries_nor_this_package() -> None:
    import json
    import torch

    import databricks.air

    assert is_user_file("/home/me/project/train.py")
    assert not is_user_file(json.__file__)
    assert not is_user_file(torch.__file__)
    assert not is_user_file(databricks.air.__file__)
    assert not is_user_file("<string>")


def test_a_collective_torch_has_not_marked_completed_is_no_wait_once_the_rank_moved_on() -> None:
    report = build(
        [
            RankView(0, snapshot=_snapshot(0, _in_collective(), [_default(4, 3)])),
            RankView(1, snapshot=_snapshot(1, _sleeping(), [_default(3, 2)])),  # #3 done, not yet marked so
        ],
        now=NOW,
    )
    assert "rank 1: running its own code (2 collectives completed)" in report.table[1]
    assert report.suspects == [1] and report.verdict.startswith("Rank 1 is behind")
