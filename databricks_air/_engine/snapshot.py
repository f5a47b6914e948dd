"""Taking a snapshot of running ranks: where each one is (its threads' stacks) and how far it got in its collectives.

The rank side is :mod:`databricks.air._engine.rank_probe`. For each rank, in parallel:

1. the rank's probe is asked, on its Unix socket, for its collectives and its stacks with source lines (this needs
   the GIL: a rank spinning in C does not answer, and the report says so);
2. only if it has not answered within :data:`PROBE_FIRST_SECONDS`, the rank is sent
   :data:`~databricks.air._engine.rank_probe.STACK_SIGNAL`, and ``faulthandler`` appends the stack of every thread
   to the rank's stack file (this works whatever the rank is doing, GIL held or not).

Why not both, always: ``faulthandler``'s dump walks the rank's threads without the GIL, and crashes the rank
(SIGSEGV) when a thread starts or ends meanwhile. Measured here (Python 3.11): a process whose threads come and go
died after 7 to 20 such signals; a rank with MLflow's thread pools died once in CI while a snapshot was taken at an
interrupt. A rank whose probe does not answer holds the GIL, and then no thread can start or end.

Whatever a source could not give is named with its reason in :attr:`RankSnapshot.sources`, never dropped. The
whole snapshot has a budget (:data:`DEFAULT_BUDGET`); a rank that cannot be reached in it is reported as such.
:func:`take_rank` runs wherever the rank's process is (this machine, or the Ray node of the rank), so that a
remote call takes the same snapshot on each node.
"""

from __future__ import annotations

import dataclasses
import json
import linecache
import os
import re
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from databricks.air import _settings
from databricks.air._engine import issue_times, rank_probe
from databricks.air._engine.rank_probe import STACK_SIGNAL

DEFAULT_BUDGET = _settings.SNAPSHOT_SECONDS.default
"""Seconds a whole snapshot may take, whatever the number of ranks."""

PROBE_FIRST_SECONDS = 1.0
"""How long the probe may take to answer before the rank's stacks are asked of ``faulthandler`` instead."""

_SETTLE_SECONDS = 0.05  # the stack file is complete once it has stopped growing for this long
_LIVENESS_SECONDS = 0.2  # how often a wait for a rank's answer checks that the rank still runs
_RANK_MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")


@dataclasses.dataclass(frozen=True)
class ProbeTarget:
    """How to reach one rank for a snapshot (paths on the rank's own machine)."""

    rank: int
    pid: int
    stack_path: str
    socket_path: str


@dataclasses.dataclass
class Frame:
    file: str
    line: int
    function: str
    source: str = ""


@dataclasses.dataclass
class ThreadStack:
    name: str
    main: bool
    frames: List[Frame]
    """Outermost first; the innermost frame (where the thread is) is the last."""


@dataclasses.dataclass
class Collective:
    seq: int
    op: str
    """``all_reduce``, ``broadcast``... (the backend prefix ``gloo:``/``nccl:`` removed)."""
    sizes: List[Any]
    since: float
    """``time.time()`` when the rank issued it."""


@dataclasses.dataclass
class GroupPosition:
    """How far one rank got in one process group's collectives."""

    group: str
    """The group's id (``"0"`` is the default group)."""
    name: str
    enqueued: int
    """Sequence number of the last collective the rank issued in this group."""
    completed: int
    active: List[Collective]

    @property
    def pending(self) -> Optional[Collective]:
        """The oldest collective the rank issued in this group that has not completed (torch may mark a completion
        a moment after the rank went on: whether the rank *waits* in it is for its stack to say)."""
        return min(self.active, key=lambda c: c.seq) if self.active and self.enqueued > self.completed else None

    @property
    def label(self) -> str:
        return "the default group" if self.name == "default_pg" or self.group == "0" else f"group {self.group}"


@dataclasses.dataclass
class RankSnapshot:
    """What is known of where one running rank was when the snapshot was taken."""

    rank: int
    pid: int
    taken_at: float
    threads: List[ThreadStack] = dataclasses.field(default_factory=list)
    groups: Optional[List[GroupPosition]] = None
    """``None`` when the probe did not answer (see ``sources``); ``[]`` when the rank has no process group."""
    sources: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Each source (``stacks``, ``probe``) -> ``"ok"`` or why it gave nothing."""
    text: str = ""
    """The full stacks as text, for ``snapshot/rank_<r>.txt``."""

    @property
    def main_thread(self) -> Optional[ThreadStack]:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)


def take(targets: Sequence[ProbeTarget], budget: float = DEFAULT_BUDGET) -> Dict[int, RankSnapshot]:
    """Snapshots of every target, taken in parallel within ``budget`` seconds, by rank."""
    deadline = time.monotonic() + budget
    answers = _in_parallel(targets, lambda target: take_rank(target, deadline), deadline + 1, "air-snapshot")
    snapshots: Dict[int, RankSnapshot] = {}
    for target in targets:
        answer = answers.get(target.rank, TimeoutError("no snapshot within the budget"))
        if isinstance(answer, BaseException):  # one rank's failure must not lose the others'
            answer = RankSnapshot(target.rank, target.pid, time.time(), sources={"snapshot": f"failed: {answer!r}"})
        snapshots[target.rank] = answer
    return snapshots


def _in_parallel(
    targets: Sequence[ProbeTarget], ask: Callable[[ProbeTarget], Any], deadline: float, name: str
) -> Dict[int, Any]:
    """``ask(target)`` for every target at once, each on a daemon thread; by rank, what each returned or raised by
    ``deadline`` (``time.monotonic()``). Plain threads, not ``concurrent.futures``: this runs in the caller, whose
    working directory may hold a user's ``concurrent.py`` (see tests/engine/test_lifecycle.py)."""
    answers: Dict[int, Any] = {}

    def run(target: ProbeTarget) -> None:
        try:
            answers[target.rank] = ask(target)
        except Exception as error:  # noqa: BLE001 - handed to the caller as the answer
            answers[target.rank] = error

    threads = [
        threading.Thread(target=run, args=(target,), name=f"{name}-{target.rank}", daemon=True) for target in targets
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return dict(answers)


def take_rank(target: ProbeTarget, deadline: float) -> RankSnapshot:
    """One rank's snapshot (see the module docstring); ``deadline`` is on ``time.monotonic()``."""
    snapshot = RankSnapshot(target.rank, target.pid, time.time())
    first = min(deadline, time.monotonic() + PROBE_FIRST_SECONDS)
    reply = _ask_probe(target.socket_path, "snapshot", first, snapshot.sources, target.pid)
    dump = ""
    if reply is None and not snapshot.sources.get("probe", "").startswith("the rank ended"):
        offset = _size(target.stack_path)
        try:
            os.kill(target.pid, STACK_SIGNAL)
        except ProcessLookupError:
            snapshot.sources["stacks"] = "the rank had already exited"
        else:
            dump = _read_dump(target.stack_path, offset, deadline, target.pid)
            snapshot.sources["stacks"] = (
                "ok"
                if dump
                else ("no stack written in time (the rank may be stopped, or its code replaced the SIGWINCH handler)")
            )
    if reply is not None:
        snapshot.groups = parse_groups(reply.get("collectives") or {}, snapshot.sources)
        snapshot.threads = [_thread(stack) for stack in reply.get("threads") or []]
    if not snapshot.threads and dump:
        snapshot.threads = parse_faulthandler(dump, _main_ident(target.stack_path))
    snapshot.text = _render(snapshot, dump)
    return snapshot


def ask_all_collectives(targets: Sequence[ProbeTarget], timeout: float) -> Dict[int, Optional[List[GroupPosition]]]:
    """:func:`ask_collectives` of every target, in parallel, by rank (``None`` for a rank that did not answer)."""
    answers = _in_parallel(
        targets, lambda target: ask_collectives(target, timeout), time.monotonic() + timeout + 1, "air-probe"
    )
    return {
        target.rank: None if isinstance(answers.get(target.rank), BaseException) else answers.get(target.rank)
        for target in targets
    }


def ask_collectives(target: ProbeTarget, timeout: float) -> Optional[List[GroupPosition]]:
    """Only the collectives of one rank (cheap: no stacks), or ``None`` when its probe does not answer."""
    reply = _ask_probe(target.socket_path, "collectives", time.monotonic() + timeout, {})
    return None if reply is None else parse_groups(reply.get("collectives") or {}, {})


def ask_all_times(
    targets: Sequence[ProbeTarget], since: Dict[int, Dict[str, int]], timeout: float
) -> Dict[int, Optional[Dict[str, Any]]]:
    """:func:`ask_times` of every target, in parallel, by rank (``None`` for a rank that did not answer)."""
    answers = _in_parallel(
        targets,
        lambda target: ask_times(target, since.get(target.rank, {}), timeout),
        time.monotonic() + timeout + 1,
        "air-probe",
    )
    return {
        target.rank: None if isinstance(answers.get(target.rank), BaseException) else answers.get(target.rank)
        for target in targets
    }


def ask_times(target: ProbeTarget, since: Dict[str, int], timeout: float) -> Optional[Dict[str, Any]]:
    """When one rank issued each collective after ``since`` (per group), and its wait for data
    (:mod:`~databricks.air._engine.issue_times`), or ``None`` when its probe does not answer."""
    request = issue_times.since_request(since, rank_probe.REQUEST_BYTES)
    return _ask_probe(target.socket_path, request, time.monotonic() + timeout, {})


class _Ended(Exception):
    """The rank ended while it was being asked."""


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            return stream.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _ask_probe(
    path: str, request: str, deadline: float, sources: Dict[str, str], pid: Optional[int] = None
) -> Optional[Dict[str, Any]]:
    started = time.monotonic()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(max(0.05, deadline - started))
            with rank_probe.socket_address(path) as address:
                connection.connect(address)
            connection.sendall(request.encode())
            chunks = []
            while True:
                connection.settimeout(min(_LIVENESS_SECONDS, max(0.05, deadline - time.monotonic())))
                try:
                    chunk = connection.recv(1 << 16)
                except socket.timeout:
                    if time.monotonic() >= deadline:
                        raise
                    if pid is not None and not alive(pid):
                        raise _Ended() from None
                    continue
                if not chunk:
                    break
                chunks.append(chunk)
    except socket.timeout:
        sources["probe"] = (
            f"no answer within {time.monotonic() - started:.1f} s (the rank may hold the GIL, in C code or a "
            "tight loop; its stacks say where)"
        )
        return None
    except _Ended:
        sources["probe"] = "the rank ended while it was asked"
        return None
    except (FileNotFoundError, ConnectionRefusedError):
        sources["probe"] = "not listening (the rank had not started its function, or had ended)"
        return None
    except OSError as error:
        sources["probe"] = f"unreachable: {error}"
        return None
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        sources["probe"] = "answered with something that is not JSON"
        return None
    sources["probe"] = "ok"
    return reply


def parse_groups(collectives: Dict[str, Any], sources: Dict[str, str]) -> List[GroupPosition]:
    """The probe's ``collectives`` answer as :class:`GroupPosition` objects (a reason goes to ``sources``)."""
    if "unavailable" in collectives:
        sources["collectives"] = str(collectives["unavailable"])
        return []
    groups = []
    for group_id, group in sorted((collectives.get("groups") or {}).items(), key=lambda item: int(item[0] or 0)):
        active = [
            Collective(int(c["seq"]), str(c["op"]).split(":", 1)[-1], list(c.get("sizes") or []), float(c["since"]))
            for c in group.get("active") or []
        ]
        groups.append(
            GroupPosition(
                str(group_id), str(group.get("name", "")), int(group["enqueued"]), int(group["completed"]), active
            )
        )
    return groups


def _thread(stack: Dict[str, Any]) -> ThreadStack:
    frames = [Frame(str(f[0]), int(f[1] or 0), str(f[2]), str(f[3] or "")) for f in stack.get("frames") or []]
    return ThreadStack(str(stack.get("name", "")), bool(stack.get("main")), frames)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_dump(path: str, offset: int, deadline: float, pid: int) -> str:
    """What ``faulthandler`` appended to ``path`` after ``offset``, once it has stopped growing (or the rank ended)."""
    last_size, last_change = offset, time.monotonic()
    while True:
        now = time.monotonic()
        size = _size(path)
        if size != last_size:
            last_size, last_change = size, now
        elif size > offset and now - last_change >= _SETTLE_SECONDS:
            break
        if now >= deadline or (size == offset and not alive(pid)):
            break
        time.sleep(0.01)
    if last_size <= offset:
        return ""
    with open(path, "rb") as stream:
        stream.seek(offset)
        return stream.read(last_size - offset).decode(errors="replace")


def _main_ident(path: str) -> Optional[int]:
    try:
        with open(path, "r", errors="replace") as stream:
            first = stream.readline()
    except OSError:
        return None
    match = re.search(r"main thread (0x[0-9a-f]+)", first)
    return int(match.group(1), 16) if match else None


_THREAD_LINE = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$")
_FRAME_LINE = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str, main_ident: Optional[int]) -> List[ThreadStack]:
    """The threads of a ``faulthandler`` dump, each with its frames outermost first."""
    threads: List[ThreadStack] = []
    current: Optional[ThreadStack] = None
    for line in text.splitlines():
        header = _THREAD_LINE.match(line)
        if header:
            ident = int(header.group(2), 16)
            current = ThreadStack(f"thread {header.group(2)}", ident == main_ident, [])
            threads.append(current)
            continue
        frame = _FRAME_LINE.match(line)
        if frame and current is not None:
            file, number = frame.group(1), int(frame.group(2))
            current.frames.insert(0, Frame(file, number, frame.group(3), linecache.getline(file, number).strip()))
    threads = [thread for thread in threads if not _is_probe(thread)]
    if threads and not any(t.main for t in threads):
        threads[-1].main = True  # a dump lists the main thread last
    threads.sort(key=lambda thread: not thread.main)
    return threads


def _below_the_launcher(frames: List[Frame]) -> List[Frame]:
    """The frames below the rank's own machinery (the rank server, the call of the user's function)."""
    for index in range(len(frames) - 1, -1, -1):
        if frames[index].file == _RANK_MODULE and frames[index].function == "run_function":
            return frames[index + 1 :]
    return frames


def _is_probe(thread: ThreadStack) -> bool:
    """The probe's own thread, waiting for requests: not where the rank is."""
    return any(frame.file == rank_probe.__file__ and frame.function == "_serve" for frame in thread.frames)


def _render(snapshot: RankSnapshot, dump: str) -> str:
    lines = [
        f"rank {snapshot.rank} (pid {snapshot.pid}), "
        f"taken at {time.strftime('%H:%M:%S', time.localtime(snapshot.taken_at))}"
    ]
    lines += [f"  {source}: {state}" for source, state in sorted(snapshot.sources.items())]
    for group in snapshot.groups or []:
        pending = group.pending
        where = f", not completed: {pending.op} #{pending.seq} {pending.sizes}" if pending else ""
        lines.append(f"  {group.label}: issued {group.enqueued}, completed {group.completed}{where}")
    for thread in snapshot.threads:
        lines.append("")
        lines.append(f"{'Main thread' if thread.main else 'Thread'} {thread.name} (most recent call last):")
        for frame in _below_the_launcher(thread.frames):
            lines.append(f'  File "{frame.file}", line {frame.line}, in {frame.function}')
            if frame.source:
                lines.append(f"    {frame.source}")
    if dump and snapshot.sources.get("probe") != "ok":
        lines += ["", "faulthandler's dump:", dump.rstrip()]
    return "\n".join(lines) + "\n"
