"""Which rank the others wait for, from when each rank issued each collective (pure: no processes, no clock).

Every rank records, in torch's flight recorder, the time it issued each collective of each process group
(``time_created_ns``, per group and sequence number). A collective can only complete once its last rank has issued
it, so, per collective:

* the **last** rank is the one that issued it last;
* its **lateness** is how long after the next-latest rank it issued it: how long every other rank of the group
  waited for it alone (0 for the ranks that were not last);
* the others **waited** for it from the next-latest rank's issue to its own.

Over a window of collectives (:class:`Window`, made by :func:`window`), each rank gets how often it was last, its
median lateness where it was last, and the share of the window's time the others waited for it; the group gets its
rate of collectives. :class:`Judge` names a straggler once (:data:`LAST_SHARE`, :data:`LATE_SHARE`,
:data:`LATE_FLOOR`) and says when it no longer is one (looser thresholds: a rank at the edge is not named and
unnamed at every window). Data or compute: a rank that uses ``databricks.air.data.DataLoader`` reports the seconds
it waited in ``next()``; when its excess over the other ranks' wait explains at least half its lateness, it is
waiting for data.

Times here are seconds on one clock: the caller's (:mod:`~databricks.air._engine.straggler_watch` converts each
rank's own clock first).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple
from databricks.air._notices import PREFIX

LAST_SHARE = 0.8
"""A straggler is last into at least this share of a window's collectives..."""
LATE_SHARE = 0.1
"""...and its median lateness is at least this share of the median interval between collectives..."""
LATE_FLOOR = 0.05
"""...and at least this many seconds (what a rank's jitter, a context switch or a garbage collection costs)."""
KEEP_LAST_SHARE = 0.6
"""A named straggler stays one while it is last into this share and at least half as late as naming takes."""
MIN_COLLECTIVES = 8
"""Fewer complete collectives than this decide nothing: they wait for the next look."""
DATA_SHARE = 0.5
"""A straggler whose extra wait for data is at least this share of its lateness is waiting for data."""


@dataclasses.dataclass(frozen=True)
class Issued:
    """One collective (a group's sequence number) and when each of its ranks issued it."""

    group: str
    seq: int
    op: str
    times: Mapping[int, float]
    """Rank -> when it issued the collective (seconds, the caller's clock)."""


@dataclasses.dataclass(frozen=True)
class DataWait:
    """What a rank had waited for data in ``databricks.air.data.DataLoader`` by some moment, in total."""

    seconds: float
    batches: int


@dataclasses.dataclass
class RankStats:
    """One rank over one window."""

    rank: int
    collectives: int = 0
    """The window's collectives this rank took part in."""
    last: int = 0
    """How many of them it issued last."""
    late_seconds: float = 0.0
    """Median, over those it issued last, of how long after the next-latest rank it issued them (0: never last)."""
    wait_share: float = 0.0
    """Share of the window's time during which the other ranks waited for this one."""
    data_wait_per_step: Optional[float] = None
    """Seconds per batch this rank waited in our DataLoader in the window (``None``: it took no batch from one)."""

    @property
    def last_fraction(self) -> float:
        return self.last / self.collectives if self.collectives else 0.0


@dataclasses.dataclass
class Window:
    """What one window of collectives says about the ranks."""

    number: int
    start: float
    end: float
    collectives: int
    op: str
    """The collective most of them were (``all_reduce``), or ``collective`` when no kind makes most of them."""
    rates: Dict[str, float]
    """Group id -> collectives per second."""
    median_interval: float
    """The median time between two consecutive collectives of a group (seconds)."""
    ranks: Dict[int, RankStats]

    def metrics(self) -> Dict[str, float]:
        """The window as metrics of the call's run."""
        values: Dict[str, float] = {}
        for group, rate in sorted(self.rates.items()):
            values["collectives_per_second" if group == "0" else f"collectives_per_second/group_{group}"] = rate
        for rank, stats in sorted(self.ranks.items()):
            values[f"straggler/late_seconds/rank_{rank}"] = stats.late_seconds
            values[f"straggler/last_fraction/rank_{rank}"] = stats.last_fraction
        return values

    def as_json(self) -> Dict[str, Any]:
        return {
            "window": self.number,
            "start": self.start,
            "end": self.end,
            "collectives": self.collectives,
            "op": self.op,
            "collectives_per_second": dict(self.rates),
            "median_interval_seconds": self.median_interval,
            "ranks": {
                str(rank): {
                    "collectives": s.collectives,
                    "last": s.last,
                    "last_fraction": s.last_fraction,
                    "late_seconds": s.late_seconds,
                    "others_wait_share": s.wait_share,
                    "data_wait_per_step": s.data_wait_per_step,
                }
                for rank, s in sorted(self.ranks.items())
            },
        }

    def candidate(self) -> Optional[RankStats]:
        """The rank last into the most collectives (the lowest rank on a tie)."""
        ranked = sorted(self.ranks.values(), key=lambda s: (-s.last_fraction, s.rank))
        return ranked[0] if ranked and ranked[0].last else None

    def late_enough(self) -> float:
        """The lateness that names a straggler in this window (seconds)."""
        return max(LATE_FLOOR, LATE_SHARE * self.median_interval)


def window(
    number: int,
    collectives: Sequence[Issued],
    data_before: Mapping[int, Optional[DataWait]],
    data_now: Mapping[int, Optional[DataWait]],
) -> Window:
    """The statistics of ``collectives`` (each issued by every rank of its group); ``data_before``/``data_now``:
    each rank's total wait for data at the window's start and end (``None``: not in our DataLoader)."""
    ranks: Dict[int, RankStats] = {}
    lateness: Dict[int, List[float]] = {}
    waited: Dict[int, List[Tuple[float, float]]] = {}
    ops: Dict[str, int] = {}
    by_group: Dict[str, List[Issued]] = {}
    start, end = float("inf"), float("-inf")
    for issued in collectives:
        if len(issued.times) < 2:
            continue
        ordered = sorted(issued.times.items(), key=lambda item: (item[1], item[0]))
        (last, last_time), next_latest = ordered[-1], ordered[-2][1]
        for rank in issued.times:
            ranks.setdefault(rank, RankStats(rank)).collectives += 1
        ranks[last].last += 1
        lateness.setdefault(last, []).append(last_time - next_latest)
        if last_time > next_latest:
            waited.setdefault(last, []).append((next_latest, last_time))
        ops[issued.op] = ops.get(issued.op, 0) + 1
        by_group.setdefault(issued.group, []).append(issued)
        start, end = min(start, ordered[0][1]), max(end, last_time)
    count = sum(ops.values())
    span = end - start if count else 0.0
    for rank, stats in ranks.items():
        stats.late_seconds = statistics.median(lateness[rank]) if rank in lateness else 0.0
        stats.wait_share = _covered(waited.get(rank, [])) / span if span > 0 else 0.0
        stats.data_wait_per_step = _per_step(data_before.get(rank), data_now.get(rank))
    for rank, now in data_now.items():  # a rank whose collectives are not complete yet still has its data
        if rank not in ranks and now is not None:
            ranks[rank] = RankStats(rank, data_wait_per_step=_per_step(data_before.get(rank), now))
    rates, intervals = {}, []
    for group, items in by_group.items():
        items.sort(key=lambda issued: issued.seq)
        ready = [max(issued.times.values()) for issued in items]
        first = min(min(issued.times.values()) for issued in items)
        rates[group] = len(items) / (ready[-1] - first) if ready[-1] > first else 0.0
        intervals += [ready[i] - ready[i - 1] for i in range(1, len(items)) if items[i].seq == items[i - 1].seq + 1]
    most = max(ops.items(), key=lambda item: item[1]) if ops else ("collective", 0)
    return Window(
        number=number,
        start=start if count else 0.0,
        end=end if count else 0.0,
        collectives=count,
        op=most[0] if most[1] * 2 > count else "collective",
        rates=rates,
        median_interval=statistics.median(intervals) if intervals else 0.0,
        ranks=dict(sorted(ranks.items())),
    )


def _covered(intervals: Iterable[Tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, reach = 0.0, float("-inf")
    for begin, finish in sorted(intervals):
        if finish <= reach:
            continue
        total += finish - max(begin, reach)
        reach = finish
    return total


def _per_step(before: Optional[DataWait], now: Optional[DataWait]) -> Optional[float]:
    if now is None:
        return None
    seconds, batches = now.seconds, now.batches
    if before is not None and before.batches <= now.batches:
        seconds, batches = seconds - before.seconds, batches - before.batches
    return seconds / batches if batches > 0 else None


# --- naming a straggler ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Straggler:
    """A rank named as the one the others wait for (``DistributedFunctionCall.stragglers`` holds them)."""

    rank: int
    op: str
    collectives: int
    """How many collectives the window that named it held."""
    last_fraction: float
    late_seconds: float
    """Its median lateness where it was last (seconds)."""
    wait_share: float
    """The share of the window's time the other ranks waited for it."""
    where: str = ""
    """Its line when it was last (``train.py:41 (dataloader next)``), or why that is not known."""
    cause: str = ""
    """``waiting for data 0.19 s per step``, ``computing (...)`` or ``not in our DataLoader``."""
    data_wait_per_step: Optional[float] = None
    named_at: float = dataclasses.field(default_factory=time.time)
    ended_at: Optional[float] = None
    """When a later window no longer named it (``None``: it was one until the call ended)."""

    def describe(self) -> str:
        """The warning's text, after ``databricks.air: ``."""
        text = (
            f"rank {self.rank} is a straggler: last into {_percent(self.last_fraction)} of "
            f"{_count(self.collectives, self.op)}, {self.late_seconds:.2f} s late (median); the others wait for it "
            f"{_percent(self.wait_share)} of the time."
        )
        return text + f" Where it was: {self.where or 'not known'}; {self.cause or 'not in our DataLoader'}."

    def clause(self) -> str:
        """One clause for the call's closing line."""
        return (
            f"rank {self.rank} was a straggler (last into {_percent(self.last_fraction)} of "
            f"{_plural(self.op)}, {self.late_seconds:.2f} s late)"
        )

    def as_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def cause(stats: RankStats, others: Sequence[RankStats]) -> str:
    """Whether ``stats``' rank is late waiting for data in our DataLoader, or computing, or does not use one."""
    mine = stats.data_wait_per_step
    if mine is None:
        return "not in our DataLoader"
    theirs = [other.data_wait_per_step for other in others if other.data_wait_per_step is not None]
    excess = mine - (statistics.median(theirs) if theirs else 0.0)
    if stats.late_seconds > 0 and excess >= DATA_SHARE * stats.late_seconds:
        return f"waiting for data {mine:.2f} s per step"
    return f"computing (it waits for data {mine:.2f} s per step)"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one window changed: a rank no longer a straggler (``ended``), a rank newly one (``named``)."""

    ended: Optional[int] = None
    named: Optional[RankStats] = None


class Judge:
    """Fed one window at a time (:meth:`decide`); names a straggler once, and says when it stops being one."""

    def __init__(self) -> None:
        self.current: Optional[int] = None

    def decide(self, window: Window) -> Verdict:
        candidate = window.candidate()
        named = candidate if candidate is not None and _names(window, candidate) else None
        if self.current is not None:
            stats = window.ranks.get(self.current)
            if named is None or named.rank == self.current:
                if stats is not None and _keeps(window, stats):
                    return Verdict()
                ended, self.current = self.current, None
                return Verdict(ended=ended)
            ended, self.current = self.current, named.rank
            return Verdict(ended=ended, named=named)
        if named is not None:
            self.current = named.rank
            return Verdict(named=named)
        return Verdict()


def _names(window: Window, stats: RankStats) -> bool:
    return (
        window.collectives >= MIN_COLLECTIVES
        and stats.last_fraction >= LAST_SHARE
        and stats.late_seconds >= window.late_enough()
    )


def _keeps(window: Window, stats: RankStats) -> bool:
    return stats.last_fraction >= KEEP_LAST_SHARE and stats.late_seconds >= window.late_enough() / 2


def ended_line(rank: int, stats: Optional[RankStats], window: Window) -> str:
    """The line that says a named straggler no longer is one."""
    if stats is None or not stats.collectives:
        return PREFIX + f"rank {rank} is no longer a straggler"
    return (
        PREFIX + f"rank {rank} is no longer a straggler (last into {_percent(stats.last_fraction)} of "
        f"{_count(window.collectives, window.op)}, {stats.late_seconds:.2f} s late)"
    )


def _percent(share: float) -> str:
    return f"{share * 100:.0f} %"


def _plural(op: str) -> str:
    return f"{op}es" if op.endswith(("s", "sh", "ch", "x")) else f"{op}s"


def _count(count: int, op: str) -> str:
    return f"{count} {op if count == 1 else _plural(op)}"
