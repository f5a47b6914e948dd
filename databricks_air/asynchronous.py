"""Calls that run in the background: ``fn.submit(...)`` returns a :class:`DistributedFunctionCall` at once.

A :class:`DistributedFunctionCall` is a :class:`concurrent.futures.Future`, so ``concurrent.futures.wait``,
``as_completed`` and ``add_done_callback`` work with it, and it says what a call is doing (:attr:`~
DistributedFunctionCall.status`, :attr:`~DistributedFunctionCall.run_id`, :attr:`~DistributedFunctionCall.log_dir`).
``fn.distributed(...)`` is the same call, waited for in the caller's thread.

Example: a sweep of four 2-GPU trials on an 8-GPU node, each on GPUs of its own::

    calls = [trial.submit(lr) for lr in (1e-4, 3e-4, 1e-3, 3e-3)]
    for call in concurrent.futures.as_completed(calls):
        print(call.name, call.result()[0])
    print_runs(calls)

:func:`print_runs` and :func:`stop` keep the reference's names (there they act on remote workloads). On Databricks
the reference has no local ``submit``: a sweep written with it is portable only where this package runs.
"""

from __future__ import annotations

import enum
import importlib
import os
import sys
import sysconfig
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Sequence, TextIO


def _from_the_standard_library(name: str) -> ModuleType:
    """Import ``name`` from Python's own library even where the script's folder (first on ``sys.path``) holds a
    file of that name: a user's ``concurrent.py`` beside the notebook must neither run nor hide ``concurrent``.

    Only the lookup of ``name``'s top package is sent to the library (a finder first on ``sys.meta_path`` while it
    runs): ``sys.path`` itself is left alone, since other threads import meanwhile (MLflow's, begun at decoration,
    failed with "No module named 'pydantic'" while ``sys.path`` held the library alone)."""
    if name in sys.modules:
        return sys.modules[name]
    paths = sysconfig.get_paths()
    library = [paths["stdlib"], paths["platstdlib"], os.path.join(paths["platstdlib"], "lib-dynload")]
    finder = _LibraryFirst(name.partition(".")[0], [folder for folder in library if os.path.isdir(folder)])
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(name)
    finally:
        sys.meta_path.remove(finder)


class _LibraryFirst:
    """Finds one top-level package in Python's own library (its submodules follow its ``__path__``)."""

    def __init__(self, package: str, library: List[str]) -> None:
        self._package = package
        self._library = library

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self._package:
            return None
        import importlib.machinery

        return importlib.machinery.PathFinder.find_spec(name, self._library)


_futures = _from_the_standard_library("concurrent.futures")
_states = _from_the_standard_library("concurrent.futures._base")
CANCELLED_AND_NOTIFIED, FINISHED = _states.CANCELLED_AND_NOTIFIED, _states.FINISHED  # the states Future itself uses
if TYPE_CHECKING:
    from concurrent.futures import Future as _Future
else:
    _Future = _futures.Future

__all__ = ["CallStatus", "DistributedFunctionCall", "print_runs", "stop"]


class CallStatus(str, enum.Enum):
    """Where a call is in its life."""

    QUEUED = "QUEUED"
    """Submitted; waiting for GPUs that other calls hold, or about to start."""
    RUNNING = "RUNNING"
    """Its ranks are starting or running."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class DistributedFunctionCall(_Future):
    """One call of a ``@distributed`` function, running in the background (``fn.submit(...)``).

    ``result(timeout=None)`` is every rank's value in rank order, or raises the exception ``fn.distributed(...)``
    would have raised (with its report). ``cancel()`` stops the ranks as an interrupt does (a snapshot of where they
    were, no process left, the MLflow run ``KILLED``) and returns once they are stopped. Rank 0's output shows in
    the caller only while a thread waits in :meth:`result`; all of it is in :attr:`log_dir`.
    """

    def __init__(self, name: str, ranks: int, kind: str) -> None:
        super().__init__()
        self.name = name
        """The function's name."""
        self.ranks = ranks
        """How many ranks the call runs."""
        self.kind = kind
        """``GPU`` or ``CPU`` ranks."""
        self.run_id: Optional[str] = None
        """The call's MLflow run, once it is open (``None`` with tracking off)."""
        self.log_dir: Optional[str] = None
        """The call's log folder, once it is made."""
        self.gpus: Sequence[str] = ()
        """The GPUs the call leased (as ``CUDA_VISIBLE_DEVICES`` names them), once it holds them."""
        self.waiting_for: Optional[str] = None
        """What a queued call waits for (``waiting for 2 GPU(s): 8 of 8 leased by 4 call(s) ...``)."""
        self.stragglers: List[Any] = []
        """The slow ranks the straggler watch named while the call ran, in order: each a
        :class:`~databricks.air._engine.stragglers.Straggler` (``rank``, ``last_fraction``, ``late_seconds``,
        ``wait_share``, ``where``, ``cause``, ``named_at``, and ``ended_at`` once it no longer was one)."""
        self.submitted_at = time.time()
        self._started: Optional[float] = None
        self._ended: Optional[float] = None
        self._status = CallStatus.QUEUED
        self._cancel_asked = threading.Event()
        self._ended_event = threading.Event()
        self._runner: Optional[threading.Thread] = None
        self._watchers = 0
        self._watchers_lock = threading.Lock()

    # --- what users read ---------------------------------------------------------------------------------------------

    @property
    def status(self) -> CallStatus:
        """``QUEUED``, ``RUNNING``, ``SUCCEEDED``, ``FAILED`` or ``CANCELLED``."""
        return self._status

    @property
    def duration(self) -> Optional[float]:
        """Seconds since the ranks started (until they ended); ``None`` while queued."""
        if self._started is None:
            return None
        return (self._ended or time.time()) - self._started

    @property
    def cancelled_asked(self) -> bool:
        """Whether :meth:`cancel` (or :func:`stop`) was called for this call."""
        return self._cancel_asked.is_set()

    def result(self, timeout: Optional[float] = None) -> Any:
        with self._watched():
            return super().result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        with self._watched():
            return super().exception(timeout)

    def cancel(self) -> bool:
        """Stop the call (a queued one never starts; a running one is stopped as an interrupt stops it) and return
        once it has ended: ``True`` when it was cancelled, ``False`` when it had already ended."""
        if self.done():
            return self.cancelled()
        self._cancel_asked.set()
        if self._runner is not None and self._runner is not threading.current_thread():
            self._ended_event.wait()
        return self.cancelled()

    def __repr__(self) -> str:
        parts = [self.name, self._status.value, f"{self.ranks} {self.kind} rank(s)"]
        if self.gpus and self.kind == "GPU":
            parts.append(f"GPUs {','.join(self.gpus)}")
        if self.duration is not None:
            parts.append(f"{self.duration:.1f} s")
        if self.run_id:
            parts.append(f"run {self.run_id}")
        return f"<DistributedFunctionCall {' '.join(parts)}>"

    # --- what the launcher calls -----------------------------------------------------------------------------------

    def _watched(self) -> "_Watch":
        return _Watch(self)

    def _live(self) -> bool:
        """Whether rank output is shown now: while someone waits in :meth:`result`."""
        return self._watchers > 0

    def _mark_running(self) -> bool:
        """The call holds what it needs and its ranks start; False when it was cancelled first."""
        if self._cancel_asked.is_set():
            return False
        if self._started is None:  # a restarted call starts again, and stays the one running call
            self._started = time.time()
        self._status = CallStatus.RUNNING
        self.waiting_for = None
        self._ensure_running()
        return True

    def _finish(self, values: Any = None, error: Optional[BaseException] = None) -> None:
        """The call ended: its values, or its error (``KeyboardInterrupt`` after a cancel: cancelled)."""
        self._ended = time.time()
        try:
            if self._cancel_asked.is_set() and (error is None or isinstance(error, KeyboardInterrupt)):
                if error is not None or self._started is None:
                    self._status = CallStatus.CANCELLED
                    self._set_cancelled()
                    return
            if error is None:
                self._status = CallStatus.SUCCEEDED
                self._ensure_running()
                self.set_result(values)
            else:
                self._status = CallStatus.CANCELLED if isinstance(error, KeyboardInterrupt) else CallStatus.FAILED
                self._ensure_running()
                self.set_exception(error)
        finally:
            self._ended_event.set()

    def _ensure_running(self) -> None:
        with self._condition:
            pending = self._state == "PENDING"
        if pending:
            self.set_running_or_notify_cancel()

    def _set_cancelled(self) -> None:
        # Future.cancel() refuses a running future; a call is cancelled while it runs, so its state is set here as
        # cancel() and set_running_or_notify_cancel() together set it, waiters and callbacks included.
        with self._condition:
            if self._state == FINISHED or self._state == CANCELLED_AND_NOTIFIED:
                return
            self._state = CANCELLED_AND_NOTIFIED
            for waiter in self._waiters:
                waiter.add_cancelled(self)
            self._condition.notify_all()
        self._invoke_callbacks()  # type: ignore[attr-defined]


class _Watch:
    """While a thread waits in ``result()``: rank output shows."""

    def __init__(self, call: DistributedFunctionCall) -> None:
        self.call = call

    def __enter__(self) -> None:
        with self.call._watchers_lock:
            self.call._watchers += 1

    def __exit__(self, *_: Any) -> None:
        with self.call._watchers_lock:
            self.call._watchers -= 1


def print_runs(calls: Iterable[DistributedFunctionCall], file: Optional[TextIO] = None) -> None:
    """Print a table of ``calls``: name, status, GPUs, duration and MLflow run."""
    import sys

    rows = [("name", "status", "ranks", "GPUs", "duration", "run")]
    for call in calls:
        duration = call.duration
        rows.append(
            (
                call.name,
                call.status.value,
                f"{call.ranks} {call.kind}",
                ",".join(call.gpus) if call.kind == "GPU" and call.gpus else "-",
                "-" if duration is None else f"{duration:.1f} s",
                call.run_id or "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    out = file or sys.stdout
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")
    out.flush()


def stop(calls: Iterable[DistributedFunctionCall]) -> List[bool]:
    """Cancel every call of ``calls`` at once (each as :meth:`DistributedFunctionCall.cancel`) and wait until they
    have all ended; returns, per call, whether it was cancelled (``False``: it had already ended)."""
    chosen = list(calls)
    for call in chosen:
        if not call.done():
            call._cancel_asked.set()
    return [call.cancel() for call in chosen]
