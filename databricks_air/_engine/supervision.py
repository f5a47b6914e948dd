"""Supervising the ranks of one call: wait until they end, stopping them all on a failure, the deadline or an interrupt.

The local call (:mod:`databricks.air._engine.local_call`) and the Ray call (:mod:`databricks.air._ray.ray_call`)
hold their ranks in different ways (process groups behind a rank server, actors on a cluster) but supervise them
with the same rules, which live here. :class:`~databricks.air._engine.call.Call` gives a :class:`RankSupervisor` four
hooks:

* ``receive(seconds)``: wait up to ``seconds`` for news of the ranks (output, exits) and handle it; where a rank
  failed, call :meth:`RankSupervisor.stop`;
* ``running()``: whether any rank is still running;
* ``terminate()``: ask every running rank, and everything it started, to end (SIGTERM);
* ``kill()``: end every running rank now (SIGKILL).

The rules:

* the first failure, or the deadline (:attr:`RankSupervisor.timed_out`), starts stopping every rank;
* a rank still running ``grace_period`` seconds after stopping began is killed;
* a ``KeyboardInterrupt`` starts stopping every rank (:attr:`RankSupervisor.interrupted`); a second one, or one while
  stopping, kills them at once. Supervision goes on until every rank has ended, and the caller raises the
  ``KeyboardInterrupt`` again once it has collected what the ranks left;
* a cancel (the ``cancelled`` event, set by another thread: a call run in the background) is an interrupt that did
  not come through a signal; it is seen within one poll.

Stopping is marked before ``terminate()`` runs, so the hook can tell why (:attr:`RankSupervisor.stop_reason`), and an
interrupt that lands while it runs (a slow look at the ranks before they are signalled, say) kills at once.

A sketch of a call site::

    supervisor = RankSupervisor(receive=poll, running=any_running, terminate=sigterm_all, kill=sigkill_all,
                                grace_period=3.0)
    supervisor.run(deadline=time.monotonic() + timeout)
    if supervisor.interrupted:
        raise KeyboardInterrupt
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Callable, Optional

POLL_SECONDS = 0.5
"""The longest a single wait for news lasts (the deadline and the grace period end a wait sooner)."""


class StopReason(enum.Enum):
    """Why the ranks were stopped before they all ended on their own, or looked at while they ran (a stall)."""

    FAILURE = "failure"
    """A rank failed."""
    TIMEOUT = "timeout"
    """The call reached its deadline."""
    INTERRUPT = "interrupt"
    """A ``KeyboardInterrupt`` reached the caller."""
    STALL = "stall"
    """The ranks looked stalled: a report is taken, and the call goes on (never a reason the supervisor stops)."""


class RankSupervisor:
    """The stopping rules of one call's ranks, over hooks that reach the ranks (see the module docstring)."""

    def __init__(
        self,
        *,
        receive: Callable[[float], None],
        running: Callable[[], bool],
        terminate: Callable[[], None],
        kill: Callable[[], None],
        grace_period: float,
        clock: Callable[[], float] = time.monotonic,
        cancelled: Optional[threading.Event] = None,
    ) -> None:
        self._receive = receive
        self._running = running
        self._terminate = terminate
        self._kill = kill
        self.grace_period = grace_period
        self._clock = clock
        self._cancelled = cancelled
        self.stopping_since: Optional[float] = None
        """When stopping began (on ``clock``), or ``None`` while the ranks run undisturbed."""
        self.killed = False
        self.timed_out = False
        """The deadline stopped the ranks."""
        self.interrupted = False
        """A ``KeyboardInterrupt`` stopped the ranks."""

    def run(self, deadline: Optional[float]) -> None:
        """Wait until no rank runs; ``deadline`` is a time on ``clock`` (``None``: no limit)."""
        while self._running():
            try:
                self._receive(self._wait_seconds(deadline))
                if self._cancelled is not None and self._cancelled.is_set() and not self.interrupted:
                    raise KeyboardInterrupt  # the same rules as an interrupt, below
                if deadline is not None and self._clock() >= deadline and self.stopping_since is None:
                    self.timed_out = True
                    self.stop()
                if (
                    self.stopping_since is not None
                    and not self.killed
                    and self._clock() - self.stopping_since >= self.grace_period
                ):
                    self.kill()
            except KeyboardInterrupt:
                if self.interrupted or self.stopping_since is not None:
                    self.kill()  # a second interrupt: no more grace
                self.interrupted = True
                try:
                    self.stop()
                except KeyboardInterrupt:  # a second one while stopping began (a look at the ranks): kill now
                    self.kill()

    @property
    def stop_reason(self) -> Optional[StopReason]:
        """Why stopping began (``None``: it has not). An interrupt outranks the deadline, which outranks a failure:
        the caller raises ``KeyboardInterrupt`` for an interrupt after the deadline."""
        if self.interrupted:
            return StopReason.INTERRUPT
        if self.timed_out:
            return StopReason.TIMEOUT
        if self.stopping_since is not None:
            return StopReason.FAILURE
        return None

    def stop(self) -> None:
        """Start stopping every rank, once: later calls change nothing (the grace period runs from the first)."""
        if self.stopping_since is not None:
            return
        self.stopping_since = self._clock()
        self._terminate()

    def kill(self) -> None:
        """Kill every rank still running."""
        self.killed = True
        self._kill()

    def _wait_seconds(self, deadline: Optional[float]) -> float:
        now = self._clock()
        wait = POLL_SECONDS
        if deadline is not None and self.stopping_since is None:
            wait = min(wait, max(0.0, deadline - now))
        if self.stopping_since is not None and not self.killed:
            wait = min(wait, max(0.0, self.stopping_since + self.grace_period - now))
        return wait
