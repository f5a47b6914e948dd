"""The keeper: the process that runs one node's command and answers for every process below it.

``python -m databricks.air.workloads.backends.keeper GRACE SCRIPT`` runs ``bash -euo pipefail SCRIPT`` in the
current folder, with its own stdout and stderr, and exits with the command's status (128 + N for a signal N).

Why a process of its own: a command's processes do not stay in one process group (torchrun starts each worker in a
session of its own), so signalling a group misses them, and if the supervisor itself is killed nothing of it is
left to clean up. The keeper is a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every process the command starts
that loses its parent is re-parented to the keeper rather than to init, so all of them stay its descendants and can
be found by walking ``/proc``. It stops them all (SIGTERM, then SIGKILL after the grace period) when

* the command ends (what it left running in the background goes with it, as on a node that finishes),
* it gets SIGTERM (a timeout or a cancel: the supervisor asks), or
* its stdin reaches end of file: the supervisor is gone, even after a SIGKILL, and the command must not outlive it.

It exits only once no descendant is left. The command runs in a session of its own, with a parent death signal
(SIGKILL): should the keeper itself be killed, bash dies with it, and whatever else is left (bash's children,
torchrun's workers, which no parent death signal covers) is re-parented to the nearest subreaper above, the
local supervisor, which stops it the same way (:func:`stop_descendants`).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence, Set

from databricks.air._engine.processes import become_subreaper, kill_group, set_parent_death_signal

_POLL_SECONDS = 0.05


def descendants(pid: int) -> List[int]:
    """Every live process below ``pid``, found through ``/proc`` (parents before children)."""
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stream:
                fields = stream.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == b"Z":  # a zombie is no process; reaping it is our job
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def with_variable(name: str, value: str) -> List[int]:
    """Every live process of this user whose environment has ``name=value`` (as its command's processes have
    ``CODE_SOURCE_PATH``, unless they changed it): what is left of a command whose keeper is gone too."""
    wanted = f"{name}={value}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as stream:
                variables = stream.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as stream:
                zombie = stream.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:  # gone, or another user's
            continue
        if wanted in variables and not zombie:
            found.append(int(entry))
    return found


def is_keeper(pid: int) -> bool:
    """Whether ``pid`` runs this module."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return __name__.encode() in stream.read().split(b"\0")
    except OSError:
        return False


def _reap() -> Dict[int, int]:
    """Collect every ended child: ``pid -> status`` as ``waitpid`` gives it."""
    ended: Dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def stop_descendants(root: int, grace: float, reap: Callable[[Set[int]], None], groups: Sequence[int] = ()) -> None:
    """SIGTERM to every live process below ``root`` (and to the process ``groups``), SIGKILL to those left after
    ``grace`` seconds; return once none is left. ``root`` must be a subreaper, or this process: ``reap(seen)`` is
    called as they end, with every pid seen so far, to collect those that became ``root``'s children."""
    seen: Set[int] = set()

    def below() -> List[int]:
        found = descendants(root)
        seen.update(found)
        return found

    left = below()
    if not left:  # the usual end: the command left nothing behind
        reap(seen)
        return
    for group in groups:
        kill_group(group, signal.SIGTERM)
    for pid in left:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while below() and time.monotonic() < deadline:
        reap(seen)
        time.sleep(_POLL_SECONDS)
    for _ in range(200):  # a process may fork while it is being killed: repeat until nothing is left
        left = below()
        if not left:
            break
        for group in groups:
            kill_group(group, signal.SIGKILL)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(_POLL_SECONDS / 5)
        reap(seen)
    reap(seen)


def reap_these(pids: Set[int]) -> None:
    """Collect those of ``pids`` that ended as children of this process (never touching any other child, which
    ``subprocess`` may be waiting for)."""
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not (or no longer) a child of ours: its parent reaps it
            pids.discard(pid)
            continue
        if done:
            pids.discard(pid)


class Keeper:
    """The command and what it started."""

    def __init__(self, script: str, grace: float) -> None:
        self.grace = grace
        self.me = os.getpid()
        self.command = subprocess.Popen(
            ["bash", "-euo", "pipefail", script],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=set_parent_death_signal,  # the keeper is killed itself: bash goes too
        )
        self.status: "int | None" = None

    def _note(self, ended: Dict[int, int]) -> None:
        if self.command.pid in ended and self.status is None:
            self.status = os.waitstatus_to_exitcode(ended[self.command.pid])
            self.command.returncode = self.status

    def stop_all(self, grace: float) -> None:
        """SIGTERM to every descendant, SIGKILL to those left after ``grace``; return once none is left."""
        stop_descendants(self.me, grace, lambda _seen: self._note(_reap()), groups=[self.command.pid])

    def serve(self) -> int:
        """Wait for the command, a stop, or the supervisor's end; stop everything; return the command's status
        (``Popen.returncode`` form)."""
        stop = {"asked": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(asked=True))
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        selector = selectors.DefaultSelector()
        selector.register(sys.stdin.fileno(), selectors.EVENT_READ)
        while True:
            self._note(_reap())
            if self.status is not None:
                self.stop_all(self.grace)  # the command ended: what it left in the background goes too
                return self.status
            if stop["asked"]:
                self.stop_all(self.grace)
                return self.status if self.status is not None else -signal.SIGTERM
            for _key, _ in selector.select(_POLL_SECONDS):
                if not os.read(sys.stdin.fileno(), 4096):  # the supervisor is gone
                    self.stop_all(min(self.grace, 1.0))
                    return -signal.SIGKILL


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_code(status: int) -> int:
    """A ``Popen.returncode`` as a shell's exit code (a signal N is 128 + N)."""
    return 128 - status if status < 0 else status


def main(argv: List[str]) -> None:
    grace, script = float(argv[0]), argv[1]
    become_subreaper()
    keeper = Keeper(script, grace)
    sys.exit(exit_code(keeper.serve()))


if __name__ == "__main__":
    main(sys.argv[1:])
