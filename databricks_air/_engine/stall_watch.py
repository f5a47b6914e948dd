"""Deciding that a running call is stalled, from how far each rank got in its collectives (pure: no processes).

A call is stalled when some ranks have waited in the same collective (one process group, one sequence number) for
at least ``stall_seconds`` while another rank has not reached it: that rank issued fewer collectives in the group,
has not created the group, did not answer (it may hold the GIL), or has ended. Work outside collectives is never a
stall, however long it takes: a checkpoint write or a data load on every rank, or ranks that all wait in the same
collective (nothing says which one is late). Each stall is reported once; the call goes on.

Ranks that have all waited that long at the same collective number of a group, but in different collectives (rank 0
in ``all_reduce`` #2, rank 1 in ``barrier`` #2) or with different shapes, **diverged**: no rank is behind, and the
collective never completes. That is a stall too, said as such.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Set, Tuple

from databricks.air import _settings
from databricks.air._engine.snapshot import GroupPosition

DEFAULT_STALL_SECONDS = _settings.STALL_SECONDS.default


def check_interval(stall_seconds: float) -> float:
    """How often to ask the ranks where they are: a quarter of the window, between 0.5 and 30 s."""
    return min(30.0, max(0.5, stall_seconds / 4)) if stall_seconds > 0 else float("inf")


@dataclasses.dataclass(frozen=True)
class RankPosition:
    """One rank at one observation: ended, or its groups (``None`` when its probe did not answer)."""

    rank: int
    ended: bool = False
    groups: Optional[Sequence[GroupPosition]] = None


@dataclasses.dataclass(frozen=True)
class Stall:
    """Ranks waiting in one collective for too long while others have not reached it."""

    group: str
    label: str
    seq: int
    op: str
    waiting: Tuple[int, ...]
    behind: Tuple[int, ...]
    waited: float
    """Seconds the longest-waiting rank has been in the collective."""
    diverged: Tuple[Tuple[int, str], ...] = ()
    """For ranks that diverged: each waiting rank and the collective it waits in (``all_reduce [[4]]``)."""

    def describe(self) -> str:
        if self.diverged:
            where = ", ".join(f"rank {rank} in {what}" for rank, what in self.diverged)
            return (
                f"{_ranks(self.waiting)} have waited {self.waited:.0f} s at collective #{self.seq} of {self.label} in "
                f"different collectives: {where}. They diverged: every rank must issue the same collectives, with "
                "the same shapes, in the same order"
            )
        return (
            f"{_ranks(self.waiting)} {'has' if len(self.waiting) == 1 else 'have'} waited {self.waited:.0f} s in "
            f"{self.op} #{self.seq} of {self.label}, which {_ranks(self.behind)} "
            f"{'has' if len(self.behind) == 1 else 'have'} not reached"
        )


class StallWatch:
    """Fed positions now and then (:meth:`observe`), it returns each new stall once."""

    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self._reported: Set[Tuple[str, int]] = set()

    @property
    def enabled(self) -> bool:
        return self.stall_seconds > 0

    def observe(self, positions: Sequence[RankPosition], now: float) -> Optional[Stall]:
        """The first stall among ``positions`` not reported before (``now`` on the ``time.time()`` scale)."""
        if not self.enabled:
            return None
        waiting: Dict[Tuple[str, int], List[Tuple[int, GroupPosition, float]]] = {}
        kinds: Dict[Tuple[str, int], Dict[int, str]] = {}
        for position in positions:
            for group in position.groups or ():
                collective = group.pending
                if collective is not None:
                    waiting.setdefault((group.group, collective.seq), []).append(
                        (position.rank, group, collective.since)
                    )
                    kinds.setdefault((group.group, collective.seq), {})[position.rank] = (
                        f"{collective.op} {collective.sizes}"
                    )
        for (group_id, seq), waiters in sorted(waiting.items()):
            if (group_id, seq) in self._reported:
                continue
            longest = now - min(since for _, _, since in waiters)
            if longest < self.stall_seconds:
                continue
            waiting_ranks = {rank for rank, _, _ in waiters}
            seen = kinds[(group_id, seq)]
            if len(set(seen.values())) > 1 and now - max(since for _, _, since in waiters) >= self.stall_seconds:
                self._reported.add((group_id, seq))
                group = waiters[0][1]
                return Stall(
                    group_id,
                    group.label,
                    seq,
                    "",
                    tuple(sorted(waiting_ranks)),
                    (),
                    longest,
                    diverged=tuple(sorted(seen.items())),
                )
            behind = tuple(
                position.rank
                for position in positions
                if position.rank not in waiting_ranks and not _reached(position, group_id, seq)
            )
            if not behind:
                continue
            self._reported.add((group_id, seq))
            group = waiters[0][1]
            op = group.pending.op if group.pending is not None else "?"
            return Stall(group_id, group.label, seq, op, tuple(sorted(waiting_ranks)), behind, longest)
        return None


def _reached(position: RankPosition, group_id: str, seq: int) -> bool:
    if position.ended or position.groups is None:
        return False
    for group in position.groups:
        if group.group == group_id:
            return group.enqueued >= seq
    return False


def _ranks(ranks: Sequence[int]) -> str:
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"
