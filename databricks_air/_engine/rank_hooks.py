"""What other parts of databricks.air run inside a rank, at its start and at its end, without the engine knowing them.

The caller names modules in ``DATABRICKS_AIR_RANK_HOOKS`` (comma-separated; tracking names its rank side there);
each has ``rank_started()`` and ``rank_ending()``. :func:`start` imports them and calls ``rank_started()`` once
the rank has the caller's environment, before the function is loaded; :func:`end` calls ``rank_ending()`` when the
rank ends, before the interpreter's own exit handlers. With no hook named, both do nothing.

A rank also ends when the launcher stops it with SIGTERM (another rank failed, the timeout, an interrupt). Then
the hooks' ``rank_ending()`` runs too, within the grace period before SIGKILL, and the rank then ends by SIGTERM as
it would have without hooks. That holds while the main thread is stuck in native code (a collective waiting for a
peer) and cannot run a Python signal handler: the signal's wakeup byte wakes a thread of ours, which runs the hooks.

``rank_ending()`` may therefore run more than once (at the SIGTERM and again at the end), never twice at the same
time; hooks make it idempotent.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import threading
from types import ModuleType
from typing import List, Optional

from databricks.air import _variables
from databricks.air._notices import notice

_hooks: List[ModuleType] = []
_lock = threading.Lock()  # rank_ending() never runs twice at the same time
_ending_in: Optional[int] = None  # the thread running rank_ending() now
_wakeup: List[socket.socket] = []  # the signal wakeup descriptor's socket pair, open for the rank's life


def start() -> None:
    """Import the hooks the caller named and start them; see the module docstring."""
    names = [name.strip() for name in os.environ.get(_variables.RANK_HOOKS, "").split(",") if name.strip()]
    if not names:
        return
    _hooks[:] = [importlib.import_module(name) for name in names]
    for hook in _hooks:
        hook.rank_started()
    _end_on_sigterm()


def end() -> None:
    """Run every hook's ``rank_ending()`` (in reverse order of start); a hook that fails is reported, not raised."""
    global _ending_in
    if not _hooks or _ending_in == threading.get_ident():
        return  # nothing to do, or a signal arrived while this thread runs the hooks: let it finish
    with _lock:
        _ending_in = threading.get_ident()
        try:
            for hook in reversed(_hooks):
                try:
                    hook.rank_ending()
                except Exception as error:  # noqa: BLE001 - one hook's trouble must not cost the others' ends
                    notice(f"{hook.__name__}.rank_ending() failed: {error!r}")
        finally:
            _ending_in = None


def _end_on_sigterm() -> None:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # someone chose how this process handles SIGTERM: leave it to them
    wake, watch = socket.socketpair()
    wake.setblocking(False)
    _wakeup[:] = [wake, watch]
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(watch,), name="databricks.air rank end", daemon=True).start()
    # SIGTERM waits (blocked) while the process forks: a child that got it before it could restore the default would
    # run our handler's replacement and lose the signal.
    os.register_at_fork(before=_hold_sigterm, after_in_parent=_release_sigterm, after_in_child=_forget_in_child)


def _on_sigterm(signum: int, frame: object) -> None:
    if _ending_in == threading.get_ident():
        return  # the rank is ending already, and exits when that is done
    end()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _watch(watch: socket.socket) -> None:
    """Run the hooks when SIGTERM arrives, even while the main thread cannot run the Python handler."""
    while True:
        try:
            received = watch.recv(64)
        except OSError:
            return
        if not received:
            return
        if signal.SIGTERM in received:
            end()


def _hold_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _release_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _forget_in_child() -> None:
    # A process forked from the rank (a DataLoader worker) has no watcher thread, and must die at SIGTERM as before.
    _hooks.clear()
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: signal handling is not ours to change
        pass
    _release_sigterm()
