"""Reading a run's node logs: the tail, the last minutes, a download, and following a run until it ends.

Logs are addressed as upstream addresses them: run, attempt (``--retry``, the latest by default) and node. A
reader sees :class:`LogEvent` values: ``LOG`` lines, ``ALERT`` events just before a line that matches a fatal
pattern (:mod:`databricks.air.log_patterns`), ``STATUS`` when the run's status changes while it is followed, and
``ERROR`` when there is nothing to show.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import shutil
import time
from typing import Iterator, List, Optional, Tuple

from databricks.air import log_patterns
from databricks.air.workloads import backends
from databricks.air.workloads.errors import InvalidArguments
from databricks.air.workloads.node_output import read_times
from databricks.air.workloads import statuses
from databricks.air.workloads.run_state import RunState
from databricks.air.workloads.runs import Run, load_run

DEFAULT_TAIL = 10_000
FOLLOW_POLL_SECONDS = 0.1
_BLOCK = 1 << 16


@dataclasses.dataclass
class LogEvent:
    """One thing to show: a line (with its time and node), an alert, a status change, or an error."""

    type: str
    """``LOG``, ``ALERT``, ``STATUS`` or ``ERROR``."""
    ts: float
    node: int = 0
    attempt: int = 0
    data: bytes = b""
    """For ``LOG``: the line's bytes as printed, with its line ending (if it has one yet)."""
    line_number: int = 0
    alert: Optional[log_patterns.LogMatch] = None
    status: Optional[str] = None
    previous_status: Optional[str] = None
    message: Optional[str] = None

    @property
    def line(self) -> str:
        return self.data.decode("utf-8", "replace").rstrip("\r\n")


def choose_attempt(run: Run, retry: int) -> int:
    """``--retry``: an attempt's number, -1 for the latest; beyond the newest is an error."""
    count = len(run.state.attempts)
    if retry == -1:
        return max(count - 1, 0)
    if retry < -1:
        raise InvalidArguments(f"--retry must be an attempt number (0 is the first) or -1 for the latest, not {retry}")
    if retry >= max(count, 1):
        raise InvalidArguments(
            f"run {run.run_id} has {count} attempt(s) (0 to {count - 1}); --retry {retry} is beyond the newest"
        )
    return retry


def check_node(run: Run, node: int) -> None:
    nodes = run.spec.node_plan.num_nodes
    if not 0 <= node < nodes:
        raise InvalidArguments(
            f"--node must be between 0 and {nodes - 1} (run {run.run_id} has {nodes} node(s)), not {node}"
        )


def tail_offset(path: str, lines: int) -> int:
    """The offset where the last ``lines`` lines of a file start (0 for the whole file)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return 0
    if lines <= 0:
        return size
    with open(path, "rb") as stream:
        position, newlines = size, 0
        if size and _byte_at(stream, size - 1) == b"\n":
            position -= 1  # the file's last line ending does not start a line
        while position > 0:
            start = max(0, position - _BLOCK)
            stream.seek(start)
            block = stream.read(position - start)
            index = len(block)
            while True:
                index = block.rfind(b"\n", 0, index)
                if index < 0:
                    break
                newlines += 1
                if newlines == lines:
                    return start + index + 1
            position = start
    return 0


def _byte_at(stream, offset: int) -> bytes:
    stream.seek(offset)
    return stream.read(1)


def minutes_offset(path: str, times_path: str, minutes: float) -> int:
    """The offset of the first line printed in the last ``minutes`` minutes."""
    since = time.time() - minutes * 60
    times = read_times(times_path)
    stamps = [stamp for _, stamp in times]
    index = bisect.bisect_left(stamps, since)
    if index >= len(times):
        try:
            return os.path.getsize(path)
        except OSError:
            return 0
    offset = times[index][0]
    if offset == 0:
        return 0
    with open(path, "rb") as stream:
        if _byte_at(stream, offset - 1) == b"\n":
            return offset
        stream.seek(offset)
        rest = stream.read(_BLOCK)
        newline = rest.find(b"\n")
        return offset + newline + 1 if newline >= 0 else offset + len(rest)


def line_number_at(path: str, offset: int) -> int:
    """The 1-based number of the line starting at ``offset``."""
    count = 1
    with open(path, "rb") as stream:
        remaining = offset
        while remaining > 0:
            block = stream.read(min(_BLOCK, remaining))
            if not block:
                break
            count += block.count(b"\n")
            remaining -= len(block)
    return count


class _NodeReader:
    """Reads one node log from an offset on, line by line, as it grows."""

    def __init__(self, run: Run, attempt: int, node: int, offset: int) -> None:
        self.path = run.folder.node_log(attempt, node)
        self.times_path = run.folder.node_times(attempt, node)
        self.attempt, self.node, self.offset = attempt, node, offset
        self.line_number = line_number_at(self.path, offset) if offset and os.path.exists(self.path) else 1
        self._partial = b""
        self._times: List[Tuple[int, float]] = []

    def _time_of(self, offset: int) -> float:
        if not self._times or self._times[-1][0] < offset:
            self._times = read_times(self.times_path)
        offsets = [item[0] for item in self._times]
        index = bisect.bisect_right(offsets, offset) - 1
        return self._times[index][1] if index >= 0 else time.time()

    def read(self, final: bool, whole_lines: bool = True) -> Iterator[LogEvent]:
        """Lines written since the last call (the last line only when ``final``, or once it ends); without
        ``whole_lines``, whatever was written, as one ``LOG`` event (for a terminal: progress bars show live)."""
        try:
            with open(self.path, "rb") as stream:
                stream.seek(self.offset)
                data = stream.read()
        except FileNotFoundError:
            data = b""
        if not whole_lines:
            if data:
                yield LogEvent("LOG", time.time(), self.node, self.attempt, data, self.line_number)
                self.offset += len(data)
                self.line_number += data.count(b"\n")
            return
        start = self.offset - len(self._partial)
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        position = start
        for line in lines:
            yield from self._events(line + b"\n", position)
            position += len(line) + 1
        if final and self._partial:
            yield from self._events(self._partial, position)
            self._partial = b""

    def _events(self, data: bytes, offset: int) -> Iterator[LogEvent]:
        stamp = self._time_of(offset)
        text = data.decode("utf-8", "replace").rstrip("\r\n")
        found = log_patterns.match_line(text.split("\r")[-1] if "\r" in text else text)
        if found is not None:
            match = log_patterns.LogMatch(found[0], self.line_number, text, found[1])
            yield LogEvent("ALERT", stamp, self.node, self.attempt, data, self.line_number, alert=match)
        yield LogEvent("LOG", stamp, self.node, self.attempt, data, self.line_number)
        self.line_number += 1


def read(
    run: Run, attempt: int, node: int, *, tail: Optional[int] = DEFAULT_TAIL, minutes: Optional[float] = None
) -> Iterator[LogEvent]:
    """The lines of one node's log as it is now (the last ``tail`` lines, or those of the last ``minutes``)."""
    path = run.folder.node_log(attempt, node)
    if not os.path.exists(path):
        yield LogEvent(
            "ERROR",
            time.time(),
            node,
            attempt,
            message=f"no logs yet for run {run.run_id}, attempt {attempt}, node {node} ({run.state.status})",
        )
        return
    offset = _start(run, attempt, node, tail, minutes)
    yield from _NodeReader(run, attempt, node, offset).read(final=True)


def _start(run: Run, attempt: int, node: int, tail: Optional[int], minutes: Optional[float]) -> int:
    path = run.folder.node_log(attempt, node)
    if minutes is not None:
        return minutes_offset(path, run.folder.node_times(attempt, node), minutes)
    if tail is not None:
        return tail_offset(path, tail)
    return 0


def follow(
    run: Run,
    node: int,
    *,
    attempt: Optional[int] = None,
    tail: Optional[int] = DEFAULT_TAIL,
    minutes: Optional[float] = None,
    whole_lines: bool = True,
    poll: float = FOLLOW_POLL_SECONDS,
) -> Iterator[LogEvent]:
    """A node's lines as they are printed, and ``STATUS`` events (the first, then each change), until the run ends.

    Without ``attempt`` it follows the latest attempt and moves on to each retry; with one, only that attempt.
    ``whole_lines=False`` gives what was written as it comes, in ``LOG`` events without alerts (for a terminal).
    """
    with backends.get(run.spec.backend).following(run.folder):
        yield from _follow(run, node, attempt, tail, minutes, whole_lines, poll)


def _follow(
    run: Run,
    node: int,
    attempt: Optional[int],
    tail: Optional[int],
    minutes: Optional[float],
    whole_lines: bool,
    poll: float,
) -> Iterator[LogEvent]:
    pinned = attempt is not None
    current = attempt if attempt is not None else choose_attempt(run, -1)
    offset = _start(run, current, node, tail, minutes) if os.path.exists(run.folder.node_log(current, node)) else 0
    reader = _NodeReader(run, current, node, offset)
    first = status_path(run.state)
    yield LogEvent("STATUS", time.time(), node, current, status=first[-1])
    reported = len(first)  # how many statuses of the run's path have been reported
    while True:
        state = load_run(run.folder).state
        later = not pinned and len(state.attempts) > current + 1  # a retry began: this attempt's log is whole
        ended = (
            state.terminal
            or (pinned and len(state.attempts) > current + 1)
            or (pinned and state.attempts and state.attempts[current].get("ended_at") is not None)
        )
        path = status_path(state)
        # A poll may come after several changes (a retry that failed within one poll): each is reported, in the
        # order it happened. This attempt's lines were written after its RUNNING and before what came next (its
        # retry's wait, the end): they go between the two. The next attempt's RUNNING waits for the next round.
        running = min(len(path), _running_index(current) + 1)
        upto = _running_index(current + 1) if later else len(path)
        yield from _status_changes(path, reported, running, state, node, current)
        if len(state.attempts) > current or ended:  # not before the state says the attempt began
            yield from reader.read(final=ended or later, whole_lines=whole_lines)
        yield from _status_changes(path, max(reported, running), upto, state, node, current)
        reported = max(reported, upto)
        if later:
            current += 1
            reader = _NodeReader(run, current, node, 0)
            continue
        if ended:
            return
        time.sleep(poll)


def _running_index(attempt: int) -> int:
    """Where attempt ``attempt``'s ``RUNNING`` is in a :func:`status_path`: after ``PENDING``, and after each earlier
    attempt's ``RUNNING`` and ``WAITING_FOR_RETRY``."""
    return 1 + 2 * attempt


def _status_changes(
    path: List[str], start: int, stop: int, state: RunState, node: int, attempt: int
) -> Iterator[LogEvent]:
    for index in range(start, stop):
        yield LogEvent(
            "STATUS",
            time.time(),
            node,
            attempt,
            status=path[index],
            previous_status=path[index - 1],
            message=state.message if index == len(path) - 1 else None,
        )


def status_path(state: RunState) -> List[str]:
    """Every status the run has had, in order, as its attempts record them: ``PENDING``, then ``RUNNING`` for each
    attempt with ``WAITING_FOR_RETRY`` between two, then where it is now. Each path extends the one before."""
    path = [statuses.PENDING]
    for number in range(len(state.attempts)):
        if number:
            path.append(statuses.WAITING_FOR_RETRY)
        path.append(statuses.RUNNING)
    if state.status != path[-1]:
        path.append(state.status)
    return path


def download(run: Run, attempt: int, nodes: List[int], folder: str) -> List[str]:
    """Copy node logs to ``folder/logs/node_<n>.log``; return their paths."""
    target = os.path.join(folder, "logs")
    os.makedirs(target, exist_ok=True)
    written = []
    for node in nodes:
        source = run.folder.node_log(attempt, node)
        destination = os.path.join(target, f"node_{node}.log")
        if os.path.exists(source):
            shutil.copyfile(source, destination)
        else:
            open(destination, "wb").close()
        written.append(destination)
    return written
