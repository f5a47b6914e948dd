"""Reading a snapshot of a call's ranks into a report: one line per rank, then the rank(s) to suspect and why.

Pure: it takes what is known of each rank (how it ended, or its :class:`~databricks.air._engine.snapshot.RankSnapshot`)
and returns text. The rules, in the order they are tried:

1. ranks waiting at the same collective number of a group in *different* collectives (or shapes) diverged;
2. ranks that issued fewer collectives in a group than a rank waiting there are **behind**: they are the suspects
   (a rank that ended is behind too, forever);
3. ranks waiting in ``init_process_group`` while others have no process group: those never joined;
4. every rank waiting in the same collective: none is behind, the collective itself is stuck;
5. no rank waiting in a collective: every rank is in its own code.

A rank's place in user code is its main thread's innermost frame outside the standard library, site-packages and
this package.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re
import site
import sysconfig
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from databricks.air._engine.snapshot import Collective, Frame, GroupPosition, RankSnapshot

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DISTRIBUTED = os.path.join("torch", "distributed", "")
_LIBRARY_PATH = re.compile(r"/(site-packages|dist-packages)/|/lib/python\d+\.\d+/")
_RENDEZVOUS_FUNCTIONS = {
    "init_process_group",
    "rendezvous",
    "_store_based_barrier",
    "_create_c10d_store",
    "_env_rendezvous_handler",
    "_tcp_rendezvous_handler",
    "init_device_mesh",
}


@dataclasses.dataclass(frozen=True)
class RankView:
    """What is known of one rank when the report is made."""

    rank: int
    ended: Optional[str] = None
    """How the rank had ended before the snapshot (``exit code 1``, ``killed by SIGKILL``), or ``None``."""
    raised: Optional[str] = None
    """The exception type a rank that failed raised (its message and traceback are reported elsewhere)."""
    snapshot: Optional[RankSnapshot] = None


@dataclasses.dataclass
class HangReport:
    """The report: :attr:`table` (one line per rank) and :attr:`verdict`; :meth:`text` joins them."""

    rows: Dict[int, str]
    """Each rank's line, by rank in rank order; the columns are aligned over every rank."""
    verdict: str
    suspects: List[int]

    @property
    def table(self) -> List[str]:
        """One line per rank, in rank order."""
        return list(self.rows.values())

    def lines(self, ranks: Iterable[int]) -> List[str]:
        """The lines of ``ranks`` only, in rank order (aligned as in the whole table)."""
        wanted = set(ranks)
        return [line for rank, line in self.rows.items() if rank in wanted]

    def text(self, heading: str = "Where the ranks were:") -> str:
        return "\n".join([heading, *self.table, "", self.verdict])


def build(views: Sequence[RankView], now: Optional[float] = None) -> HangReport:
    """The report for ``views`` (one per rank)."""
    now = time.time() if now is None else now
    ordered = sorted(views, key=lambda view: view.rank)
    places = {view.rank: user_place(view.snapshot) for view in ordered}
    rows = dict(zip((view.rank for view in ordered), _table(ordered, places, now)))
    verdict, suspects = _verdict(ordered, places, now)
    return HangReport(rows=rows, verdict=verdict, suspects=suspects)


# --- where a rank is -----------------------------------------------------------------------------------------------


def user_place(snapshot: Optional[RankSnapshot]) -> Optional[Frame]:
    """The innermost frame of the rank's main thread that is the user's code, with its source line (code shipped by
    value keeps its file: :mod:`databricks.air._engine.by_value`)."""
    thread = snapshot.main_thread if snapshot is not None else None
    if thread is None:
        return None
    for frame in reversed(thread.frames):
        if is_user_file(frame.file):
            source = frame.source or linecache.getline(frame.file, frame.line).strip()
            return Frame(frame.file, frame.line, frame.function, source)
    return None


def innermost_call(snapshot: Optional[RankSnapshot]) -> Optional[Frame]:
    """The main thread's innermost frame, wherever it is (``time.sleep`` has none: the caller of C code is shown)."""
    thread = snapshot.main_thread if snapshot is not None else None
    return thread.frames[-1] if thread is not None and thread.frames else None


def is_user_file(path: str) -> bool:
    """Whether ``path`` is the user's code: not the standard library, site-packages, this package or ``<string>``."""
    if not path or path.startswith("<"):
        return False
    absolute = os.path.abspath(path)
    if _LIBRARY_PATH.search(absolute):  # any interpreter's, also on another machine (a Ray node)
        return False
    return not any(absolute.startswith(prefix) for prefix in _library_prefixes())


def _library_prefixes() -> Tuple[str, ...]:
    paths = {sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        paths.update(site.getsitepackages())
    except AttributeError:  # virtualenv's old site module
        pass
    paths.add(_PACKAGE_DIR)
    return tuple(os.path.join(os.path.abspath(path), "") for path in paths if path)


def _waiting(snapshot: Optional[RankSnapshot]) -> List[Tuple[GroupPosition, Collective]]:
    """The collectives the rank waits in: issued, not completed, and its main thread in ``torch.distributed``
    (or no stack to tell)."""
    if snapshot is None or not snapshot.groups:
        return []
    pending = [(group, group.pending) for group in snapshot.groups if group.pending is not None]
    thread = snapshot.main_thread
    if (
        pending
        and thread is not None
        and thread.frames
        and not any(_TORCH_DISTRIBUTED in f.file for f in thread.frames)
    ):
        return []  # torch has not marked the last one completed yet, but the rank has moved on
    return pending


def _in_rendezvous(snapshot: Optional[RankSnapshot]) -> bool:
    thread = snapshot.main_thread if snapshot is not None else None
    return thread is not None and any(frame.function in _RENDEZVOUS_FUNCTIONS for frame in thread.frames)


def _group(snapshot: Optional[RankSnapshot], group_id: str) -> Optional[GroupPosition]:
    for group in (snapshot.groups or []) if snapshot is not None else []:
        if group.group == group_id:
            return group
    return None


# --- the table -----------------------------------------------------------------------------------------------------


def _table(views: Sequence[RankView], places: Dict[int, Optional[Frame]], now: float) -> List[str]:
    rows = [(f"rank {view.rank}", _state(view, now), _where(view, places[view.rank])) for view in views]
    width = max(len(state) for _, state, _ in rows)
    return [f"  {name}: {state.ljust(width)}   {where}".rstrip() for name, state, where in rows]


def _state(view: RankView, now: float) -> str:
    if view.ended is not None:
        return f"ended ({view.ended}{', raised ' + view.raised if view.raised else ''})"
    snapshot = view.snapshot
    if snapshot is None:
        return "running (no snapshot)"
    waiting = _waiting(snapshot)
    if waiting:
        group, collective = waiting[0]
        return f"waiting in {collective.op} #{collective.seq} of {group.label} for {_seconds(now - collective.since)}"
    if _in_rendezvous(snapshot):
        return "waiting in init_process_group (for the other ranks to join)"
    if snapshot.groups is None:
        return _unanswered(snapshot)
    done = sum(max(0, group.completed) for group in snapshot.groups)
    if snapshot.groups:
        return f"running its own code ({done} collective{'' if done == 1 else 's'} completed)"
    return "running its own code (no collective yet)"  # a group without collectives is not in the flight recorder


def _unanswered(snapshot: RankSnapshot) -> str:
    """What a rank whose probe gave no collectives was doing, as far as the reason says."""
    probe = snapshot.sources.get("probe", "")
    if snapshot.sources.get("stacks") == "the rank had already exited" or probe.startswith("the rank ended"):
        return "ending (it exited while it was looked at)"
    if probe.startswith("not listening"):
        return "starting or ending (its probe was not listening)"
    if probe.startswith("no answer within"):
        return "running, not answering its probe (holding the GIL?)"
    return f"running (its probe: {probe})" if probe else "running (no answer from its probe)"


def _where(view: RankView, place: Optional[Frame]) -> str:
    if view.ended is not None:
        return ""
    if place is None:
        if view.snapshot is not None and not view.snapshot.threads:
            reasons = "; ".join(f"{k}: {v}" for k, v in sorted(view.snapshot.sources.items()) if v != "ok")
            return f"(no stack: {reasons})" if reasons else "(no stack)"
        return "(not in user code)"
    return f"{_short(place.file)}:{place.line}: {place.source}".rstrip(": ")


def _short(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return relative if not relative.startswith("..") else path


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{max(0.0, seconds):.1f} s"


# --- the verdict ---------------------------------------------------------------------------------------------------


def _verdict(views: Sequence[RankView], places: Dict[int, Optional[Frame]], now: float) -> Tuple[str, List[int]]:
    running = [view for view in views if view.ended is None and view.snapshot is not None]
    waits: Dict[Tuple[str, int], List[Tuple[int, GroupPosition, Collective]]] = {}
    for view in running:
        for group, collective in _waiting(view.snapshot):
            waits.setdefault((group.group, collective.seq), []).append((view.rank, group, collective))

    for (group_id, seq), waiting in sorted(waits.items()):  # 1. diverged
        kinds = {(collective.op, repr(collective.sizes)) for _, _, collective in waiting}
        if len(kinds) > 1:
            described = ", ".join(f"rank {rank} in {c.op} {c.sizes}" for rank, _, c in waiting)
            return (
                f"The ranks diverged at collective #{seq} of {waiting[0][1].label}: {described}. Every rank must "
                "issue the same collectives, with the same shapes, in the same order (look for a branch that "
                "depends on the rank or on the data).",
                sorted(rank for rank, _, _ in waiting),
            )

    for (group_id, seq), waiting in sorted(waits.items()):  # 2. behind
        waiting_ranks = {rank for rank, _, _ in waiting}
        behind = []
        for view in views:
            if view.rank in waiting_ranks:
                continue
            position = _group(view.snapshot, group_id)
            if view.ended is not None or position is None or position.enqueued < seq:
                behind.append(view)
        if behind:
            label, op = waiting[0][1].label, waiting[0][2].op
            waited = _seconds(now - min(c.since for _, _, c in waiting))
            one = len(behind) == 1
            parts = [_behind_clause(view, group_id, label, places, pronoun=one) for view in behind]
            waiters = _ranks(sorted(waiting_ranks))
            return (
                f"{_subject([v.rank for v in behind])} {'is' if one else 'are'} behind: {'; '.join(parts)}, while "
                f"{waiters} {'waits' if len(waiting_ranks) == 1 else 'wait'} in {op} #{seq} of {label} "
                f"for {waited}.",
                [view.rank for view in behind],
            )

    joining = [view for view in running if _in_rendezvous(view.snapshot)]  # 3. never joined
    if joining:
        absent = [view for view in views if view not in joining]
        if absent:
            parts = []
            for view in absent:
                if view.ended is not None:
                    parts.append(f"rank {view.rank} ended ({view.ended})")
                else:
                    parts.append(f"rank {view.rank} {_doing(view, places)}")
            return (
                f"{_subject([v.rank for v in absent])} never joined the process group: {'; '.join(parts)}; "
                f"{_ranks([v.rank for v in joining])} {'waits' if len(joining) == 1 else 'wait'} in "
                "init_process_group for it.",
                [view.rank for view in absent],
            )

    if waits and len(running) == len(views):  # 4. stuck together
        (group_id, seq), waiting = min(waits.items())
        if len(waiting) == len(views):
            return (
                f"Every rank waits in {waiting[0][2].op} #{seq} of {waiting[0][1].label}, and no rank is behind: the "
                "collective itself does not complete (a network or device problem, or a process outside this call "
                "in the group).",
                [],
            )

    if running and not waits:  # 5. all in their own code
        return (
            "No rank waits in a collective: each is running its own code at the place shown (a long step, a loop "
            "that does not end, or a lock).",
            [],
        )
    unknown = [view.rank for view in views if view.ended is None and view.snapshot is None]
    if unknown:
        return f"No snapshot of {_ranks(unknown)}: where the ranks were is not known.", []
    return "No rank can be singled out from what the ranks reported.", []


def _behind_clause(view: RankView, group_id: str, label: str, places: Dict[int, Optional[Frame]], pronoun: bool) -> str:
    who = "it" if pronoun else f"rank {view.rank}"
    if view.ended is not None:
        return f"{who} ended ({view.ended})"
    snapshot = view.snapshot
    if snapshot is not None and snapshot.groups is None:
        return f"{who} did not answer about its collectives (holding the GIL?) and {_doing(view, places)}"
    group = _group(snapshot, group_id)
    if group is None:
        return f"{who} is not in {label} yet and {_doing(view, places)}"
    done = max(0, group.completed)
    return f"{who} completed {done} collective{'' if done == 1 else 's'} of {label} and {_doing(view, places)}"


def _doing(view: RankView, places: Dict[int, Optional[Frame]]) -> str:
    place = places.get(view.rank)
    call = innermost_call(view.snapshot)
    waiting = _waiting(view.snapshot)
    if waiting:
        group, collective = waiting[0]
        return f"waits in {collective.op} #{collective.seq} of {group.label}"
    if place is None:
        return "is not in user code" if call is None else f"is in {call.function} ({_short(call.file)}:{call.line})"
    deeper = call.function if call is not None and (call.file, call.line) != (place.file, place.line) else None
    return f"is in {_called(place, deeper)} at {_short(place.file)}:{place.line}"


_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*\(")


def _called(place: Frame, deeper: Optional[str]) -> str:
    """What the user's line is calling: the call in its source whose name is the deeper frame's function (``re.match``
    for ``re.match(...)``), else the line's last call (``time.sleep``, which has no Python frame), else its function."""
    calls = _CALLED.findall(place.source)
    if deeper is not None:
        for name in calls:
            if name.rsplit(".", 1)[-1] == deeper:
                return name
    return calls[-1] if calls else place.function


def _ranks(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"


def _subject(ranks: Iterable[int]) -> str:
    text = _ranks(ranks)
    return text[:1].upper() + text[1:]
