"""How a run on a Ray cluster reaches the registry of the machine that submitted it: through the Ray job's log.

The supervisor runs as the job's entrypoint, on the cluster; the registry (``air get``, ``list``, ``logs``) is on
the submitting machine, which may be closed while the run goes on and may reach nothing of the cluster but its
dashboard. So the supervisor writes everything the registry needs to its standard output, which Ray keeps as the
job's log and serves through the dashboard: one *frame* per line, ``@air {json}``::

    @air {"k": "state", "s": {...}}                                      the run's state, whole, at each change
    @air {"k": "log", "a": 0, "n": 1, "o": 1024, "t": 1764612345.2, "d": "epoch 1\\n"}
                                                                         node 1's output of attempt 0, at offset 1024

``d`` holds the output as text, or ``b`` as base64 where it is not UTF-8. The output is the node logs' own bytes,
secrets already redacted. Other lines are Ray's and the supervisor's own messages. :func:`apply` replays a log
into a run folder: node logs (written at their offsets, so replaying twice changes nothing), their ``.times``,
and the state; a cursor in the folder's state says how much of the log was applied already.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

from databricks.air.workloads.node_output import TIME_STEP, read_times, write_time
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import RunState

PREFIX = "@air "
CURSOR = "ray_log_cursor"
"""The owner's key for how many characters of the job's log were applied."""
MESSAGES_FILE = "supervisor.log"
_REMOTE_FIELDS = ("status", "message", "ended_at", "attempts", "alerts", "tracking_uri", "environment_path")


# --- on the cluster: writing frames ---------------------------------------------------------------------------------


class Reporter:
    """Writes frames to the job's log (standard output), one whole line at a time, from any thread."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()

    def frame(self, kind: str, **fields: Any) -> None:
        line = PREFIX + json.dumps({"k": kind, **fields}, separators=(",", ":")) + "\n"
        with self._lock:
            self._stream.write(line)
            self._stream.flush()

    def state(self, state: RunState) -> None:
        self.frame("state", s=state.to_dict())

    def node_output(self, attempt: int, node: int) -> "NodeEcho":
        """The ``echo`` of one node's :class:`~..node_output.NodeOutput`: what it writes to the log, as frames."""
        return NodeEcho(self, attempt, node)


class NodeEcho:
    """A binary stream that sends what is written to it as ``log`` frames of one node and attempt."""

    def __init__(self, reporter: Reporter, attempt: int, node: int) -> None:
        self.reporter, self.attempt, self.node = reporter, attempt, node
        self.offset = 0

    def write(self, data: bytes) -> int:
        try:
            body: Dict[str, str] = {"d": data.decode("utf-8")}
        except UnicodeDecodeError:
            body = {"b": base64.b64encode(data).decode("ascii")}
        self.reporter.frame("log", a=self.attempt, n=self.node, o=self.offset, t=round(time.time(), 3), **body)
        self.offset += len(data)
        return len(data)

    def flush(self) -> None:
        pass


class ReportingRunFolder(RunFolder):
    """The supervisor's run folder on the cluster: every state it writes is also sent as a frame; the nodes find
    the run's files in their copy of the job's working directory, which is ``node_root`` on this node."""

    def __init__(self, path: str, run_id: int, reporter: Reporter, node_root: str) -> None:
        super().__init__(path, run_id)
        self.reporter = reporter
        self.node_root = node_root

    def node_file(self, name: str) -> str:
        return os.path.join(self.node_root, name)

    def write_state(self, state: RunState) -> None:
        super().write_state(state)
        self.reporter.state(state)


# --- on the submitting machine: replaying frames ----------------------------------------------------------------


def split_frames(text: str) -> Tuple[List[Dict[str, Any]], List[str], int]:
    """The frames and the other lines of ``text``'s complete lines, and how many characters those lines take."""
    frames, others = [], []
    end = text.rfind("\n") + 1
    for line in text[:end].splitlines():
        if line.startswith(PREFIX):
            try:
                frames.append(json.loads(line[len(PREFIX) :]))
                continue
            except ValueError:
                pass  # a frame cut by something else writing at the same time: keep it as a message
        others.append(line)
    return frames, others, end


def apply(
    folder: RunFolder, log_text: str, start: int = 0, settle: Optional[Callable[[RunState], None]] = None
) -> RunState:
    """Replay the frames of the job's log that the folder has not seen yet (``log_text`` from character ``start``
    of the log); return the folder's state. ``settle`` may change the state further, under the same lock."""

    def change(state: RunState) -> None:
        cursor = int(state.owner.get(CURSOR, 0))
        skip = max(0, cursor - start)
        if skip < len(log_text):
            frames, others, used = split_frames(log_text[skip:])
            if frames or others:
                replay_into(folder, state, frames, others)
            state.owner[CURSOR] = start + skip + used
        if settle is not None:
            settle(state)

    return folder.update(change)


def replay_into(folder: RunFolder, state: RunState, frames: List[Dict[str, Any]], others: List[str]) -> None:
    """Write ``frames`` into the folder's node logs and into ``state`` (other lines go to the messages file)."""
    writers: Dict[Tuple[int, int], _LogWriter] = {}
    latest: Optional[Dict[str, Any]] = None
    try:
        for frame in frames:
            if frame.get("k") == "log":
                key = (int(frame["a"]), int(frame["n"]))
                if key not in writers:
                    writers[key] = _LogWriter(folder.node_log(*key), folder.node_times(*key))
                data = frame["d"].encode("utf-8") if "d" in frame else base64.b64decode(frame.get("b", ""))
                writers[key].write(int(frame["o"]), float(frame["t"]), data)
            elif frame.get("k") == "state":
                latest = frame["s"]
    finally:
        for writer in writers.values():
            writer.close()
    if others:
        with open(folder.file(MESSAGES_FILE), "a", encoding="utf-8") as stream:
            stream.write("\n".join(others) + "\n")
    if latest is not None:
        remote = RunState.from_dict(latest)
        for name in _REMOTE_FIELDS:
            setattr(state, name, getattr(remote, name))
        state.owner.pop("attempt", None)
        if "attempt" in remote.owner:
            state.owner["attempt"] = remote.owner["attempt"]


class _LogWriter:
    """A node log and its ``.times`` on the submitting machine, written where each frame says."""

    def __init__(self, log_path: str, times_path: str) -> None:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        self._log = open(log_path, "ab")
        self._size = self._log.tell()
        times = read_times(times_path)
        self._last_time = times[-1][1] if times else 0.0
        self._times = open(times_path, "ab")

    def write(self, offset: int, when: float, data: bytes) -> None:
        if offset + len(data) <= self._size:
            return  # replayed already
        data = data[max(0, self._size - offset) :]
        if when - self._last_time >= TIME_STEP:
            write_time(self._times, self._size, when)
            self._last_time = when
        self._log.write(data)
        self._size += len(data)

    def close(self) -> None:
        self._log.close()
        self._times.close()


def messages_tail(folder: RunFolder, lines: int = 15) -> str:
    """The last lines of what Ray and the supervisor printed (for a run that ended without saying why)."""
    try:
        with open(folder.file(MESSAGES_FILE), encoding="utf-8", errors="replace") as stream:
            kept = [line.rstrip("\n") for line in stream if line.strip()]
    except OSError:
        return ""
    return "\n".join(kept[-lines:])
