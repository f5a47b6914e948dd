"""While a call runs, every ``DATABRICKS_AIR_STRAGGLER_SECONDS``: when did each rank issue its latest collectives,
and is one rank the one the others wait for?

Driven from :meth:`Call.supervise <databricks.air._engine.call.Call.supervise>`'s loop, as the stall watch is
(:meth:`StragglerWatch.look_when_due`). Each look asks every running rank's probe for the collectives it issued
since the last look (:meth:`Call.issue_times <databricks.air._engine.call.Call.issue_times>`, the flight recorder's
``time_created_ns`` per group and sequence number) and its total wait for data in our DataLoader. A collective
counts once every rank of its group has reported it; once a look has at least
:data:`~databricks.air._engine.stragglers.MIN_COLLECTIVES` of them, they are a window
(:func:`~databricks.air._engine.stragglers.window`) and :class:`~databricks.air._engine.stragglers.Judge` decides.

What comes of a window:

* a straggler newly named: one warning in the cell, with where the rank was when it was last (its stack, taken
  through the snapshot code, retried a few times until the rank is in its own code rather than in a collective) and
  whether it waits for data; a rank no longer one: one line;
* every window's figures, and every straggler, in ``stragglers.json`` of the call's log folder;
* everything, to :attr:`Launch.on_stragglers <databricks.air._engine.call.Launch.on_stragglers>` (the run's
  metrics and tag, the handle's ``stragglers``).

Clocks: on one machine every rank's times are on the same clock. A way of starting ranks whose ranks run on other
machines (Ray) adds to each answer the offset of the rank's clock from the caller's (``clock_offset``, seconds) and
how it was measured (``clock_note``); the offset is taken off the rank's times.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Set, Tuple

from databricks.air._call_folder import CallFolder
from databricks.air._engine import hang_report, stragglers
from databricks.air._engine.snapshot import RankSnapshot
from databricks.air._engine.stragglers import DataWait, Issued, Straggler, Window
from databricks.air._notices import notice

if TYPE_CHECKING:
    from databricks.air._engine.call import Call

ASK_SECONDS = 1.0
"""How long a look waits for the ranks' answers."""
STACK_SECONDS = 2.0
"""How long naming a straggler may look for its stack."""
KEPT_WINDOWS = 1000
"""The windows kept in ``stragglers.json`` (the latest)."""
_STALE_LOOKS = 3  # a collective some rank of its group never reported (its ring moved on) is dropped after this
_ONE_MACHINE = "every rank on the caller's machine: one clock"


@dataclasses.dataclass(frozen=True)
class News:
    """What one window brought: its figures, a straggler newly named, one that no longer is."""

    window: Window
    named: Optional[Straggler] = None
    ended: Optional[Straggler] = None


class StragglerWatch:
    """The straggler watch of one call's attempt (see the module docstring)."""

    def __init__(
        self, seconds: float, log_dir: Optional[str], world_size: int, on_news: Optional[Callable[[News], None]] = None
    ) -> None:
        self.seconds = seconds
        self.log_dir = log_dir
        self.world_size = world_size
        self.on_news = on_news
        self.stragglers: List[Straggler] = []
        self.windows: List[Window] = []
        self.clock = _ONE_MACHINE
        self._next = time.monotonic() + seconds if seconds > 0 else float("inf")
        self._judge = stragglers.Judge()
        self._since: Dict[int, Dict[str, int]] = {}
        self._members: Dict[str, Set[int]] = {}
        self._pending: Dict[Tuple[str, int], Dict[int, float]] = {}
        self._ops: Dict[Tuple[str, int], str] = {}
        self._first_seen: Dict[Tuple[str, int], int] = {}
        self._complete: List[Issued] = []
        self._data_mark: Dict[int, Optional[DataWait]] = {}
        self._looks = 0

    @property
    def enabled(self) -> bool:
        return self.seconds > 0 and self.world_size > 1

    def look_when_due(self, call: "Call") -> None:
        """Look, if a look is due (never raises: a failed look is said once and the watch stops)."""
        if not self.enabled or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.seconds
        try:
            self.look(call)
        except Exception as error:  # noqa: BLE001 - the watch is a help, never a reason for the call to fail
            self.seconds = 0
            notice(f"the straggler watch stopped: {error!r}")

    def look(self, call: "Call") -> Optional[News]:
        """Ask the running ranks, take in their answers, and decide when there is enough for a window."""
        running = call.running()
        if len(running) < 2:
            return None
        answers = call.issue_times(running, {o.rank: dict(self._since.get(o.rank, {})) for o in running}, ASK_SECONDS)
        if not answers:
            return None  # this way of starting ranks cannot tell
        self._looks += 1
        data_now = dict(self._data_mark)
        for rank, answer in answers.items():
            if answer is not None and "groups" in answer:
                data_now[rank] = self._take(rank, answer)
        self._collect()
        if len(self._complete) < stragglers.MIN_COLLECTIVES:
            return None
        window = stragglers.window(len(self.windows) + 1, self._complete, self._data_mark, data_now)
        self._complete, self._data_mark = [], data_now
        return self._decide(call, window)

    # --- taking the answers in -------------------------------------------------------------------------------------

    def _take(self, rank: int, answer: Dict[str, Any]) -> Optional[DataWait]:
        offset = float(answer.get("clock_offset", 0.0))
        if answer.get("clock_note"):
            self.clock = str(answer["clock_note"])
        since = self._since.setdefault(rank, {})
        for group_id, group in (answer.get("groups") or {}).items():
            self._members.setdefault(group_id, set()).add(rank)
            ops = list(group.get("ops") or [])
            for seq, ns, index in group.get("issued") or []:
                key = (group_id, int(seq))
                self._pending.setdefault(key, {})[rank] = int(ns) / 1e9 - offset
                self._first_seen.setdefault(key, self._looks)
                if key not in self._ops and 0 <= index < len(ops):
                    self._ops[key] = ops[index]
                since[group_id] = max(since.get(group_id, 0), int(seq))
        data = answer.get("data")
        return DataWait(float(data["seconds"]), int(data["batches"])) if data else None

    def _collect(self) -> None:
        """Move every collective that each rank of its group has reported to the window; drop the stale ones."""
        for key in sorted(self._pending):
            group_id, seq = key
            times = self._pending[key]
            members = set(range(self.world_size)) if group_id == "0" else self._members.get(group_id, set())
            if len(members) >= 2 and members <= set(times):
                self._complete.append(Issued(group_id, seq, self._ops.get(key, "collective"), dict(times)))
            elif self._looks - self._first_seen.get(key, self._looks) < _STALE_LOOKS:
                continue
            del self._pending[key]
            self._ops.pop(key, None)
            self._first_seen.pop(key, None)

    # --- deciding ------------------------------------------------------------------------------------------------

    def _decide(self, call: "Call", window: Window) -> News:
        self.windows.append(window)
        verdict = self._judge.decide(window)
        ended: Optional[Straggler] = None
        named: Optional[Straggler] = None
        if verdict.ended is not None:
            ended = next((s for s in reversed(self.stragglers) if s.rank == verdict.ended and s.ended_at is None), None)
            if ended is not None:
                ended.ended_at = time.time()
            print(
                stragglers.ended_line(verdict.ended, window.ranks.get(verdict.ended), window),
                file=sys.stderr,
                flush=True,
            )
        if verdict.named is not None:
            stats = verdict.named
            others = [s for rank, s in window.ranks.items() if rank != stats.rank]
            named = Straggler(
                rank=stats.rank,
                op=window.op,
                collectives=window.collectives,
                last_fraction=stats.last_fraction,
                late_seconds=stats.late_seconds,
                wait_share=stats.wait_share,
                where=self._where(call, stats.rank),
                cause=stragglers.cause(stats, others),
                data_wait_per_step=stats.data_wait_per_step,
            )
            self.stragglers.append(named)
            notice(f"{named.describe()}")
        news = News(window, named, ended)
        self._write()
        if self.on_news is not None:
            try:
                self.on_news(news)
            except Exception as error:  # noqa: BLE001 - keeping it elsewhere is a nicety
                notice(f"could not keep the straggler figures: {error!r}")
        return news

    def _where(self, call: "Call", rank: int) -> str:
        """Where ``rank`` is while it is in its own code (the others wait for it): its line and what it calls."""
        outcome = call.outcomes.get(rank)
        if outcome is None or not outcome.running:
            return "not known (it had ended)"
        deadline = time.monotonic() + STACK_SECONDS
        seen: Optional[RankSnapshot] = None
        while time.monotonic() < deadline:
            taken = call.snapshot([outcome], max(0.2, min(1.5, deadline - time.monotonic()))).get(rank)
            if taken is not None and taken.threads:
                seen = taken
                if not hang_report._waiting(taken):  # in its own code: the moment it makes the others wait
                    break
            time.sleep(random.uniform(0.01, 0.05))  # another moment of its step
        return describe_place(seen)

    def _write(self) -> None:
        if not self.log_dir or not os.path.isdir(self.log_dir):
            return
        path = CallFolder(self.log_dir).stragglers
        content = {
            "interval_seconds": self.seconds,
            "clock": self.clock,
            "thresholds": {
                "last_share": stragglers.LAST_SHARE,
                "late_share_of_interval": stragglers.LATE_SHARE,
                "late_floor_seconds": stragglers.LATE_FLOOR,
                "min_collectives": stragglers.MIN_COLLECTIVES,
            },
            "stragglers": [straggler.as_json() for straggler in self.stragglers],
            "windows": [window.as_json() for window in self.windows[-KEPT_WINDOWS:]],
        }
        try:
            with open(path + ".tmp", "w") as stream:
                json.dump(content, stream, indent=1)
            os.replace(path + ".tmp", path)
        except OSError:
            pass  # the folder went away (pruned, or the disk is full): the cell and the run still have it


_LOADER_FILES = (os.path.join("torch", "utils", "data", ""), os.path.join("databricks_air", "data", ""))


def describe_place(snapshot: Optional[RankSnapshot]) -> str:
    """``train.py:41 (dataloader next)``: the rank's innermost line of user code and what it calls there; in a
    DataLoader's ``next()``, the line that asked for the batch (and the dataset's line it is in, if any)."""
    if snapshot is None or snapshot.main_thread is None:
        return "not known (no stack)"
    place = hang_report.user_place(snapshot)
    frames = snapshot.main_thread.frames
    if place is None:
        call = hang_report.innermost_call(snapshot)
        return (
            f"not in user code ({call.function} at {hang_report._short(call.file)}:{call.line})"
            if call
            else "not known (no stack)"
        )
    loader = next(
        (
            i
            for i, frame in enumerate(frames)
            if frame.function == "__next__" and any(part in frame.file for part in _LOADER_FILES)
        ),
        None,
    )
    asker = (
        next((frame for frame in reversed(frames[:loader]) if hang_report.is_user_file(frame.file)), None)
        if loader is not None
        else None
    )
    index = max(
        (i for i, f in enumerate(frames) if (f.file, f.line, f.function) == (place.file, place.line, place.function)),
        default=len(frames) - 1,
    )
    deeper = frames[index + 1 :]
    what = hang_report._called(place, deeper[-1].function if deeper else None)
    if loader is None or asker is None:
        return f"{hang_report._short(place.file)}:{place.line} ({what})"
    inside = f": {what} at {hang_report._short(place.file)}:{place.line}" if index > loader else ""
    return f"{hang_report._short(asker.file)}:{asker.line} (dataloader next{inside})"
