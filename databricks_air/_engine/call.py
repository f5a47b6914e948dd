"""One call's ranks behind one contract, however they are started: :class:`Call`, and what it is given, :class:`Launch`.

There is one implementation per way of starting processes, as torch elastic has one ``PContext`` per way:

* :class:`~databricks.air._engine.local_call.LocalCall`: ranks forked by a rank server on this machine;
* :class:`~databricks.air._ray.ray_call.RayCall`: ranks started by Ray actors on a cluster (``remote=True``).

:func:`databricks.air._engine.launch.run` chooses one. Each implementation says how to reach its ranks:

* :meth:`Call.start`: start every rank, within the deadline; each gets its :class:`RankOutcome` in
  :attr:`Call.outcomes` and its :class:`~databricks.air._engine.output.RankOutput` in :attr:`Call.outputs`;
* :meth:`Call.poll`: wait up to some seconds for news of the ranks (output, exits) and record it
  (:meth:`Call.record_exit`);
* :meth:`Call.send`: send a signal to some ranks and to every process each started;
* :meth:`Call.close`: make sure nothing of the call survives, whatever happened (also after a failed start).

and every call goes the same way, which lives here (:meth:`Call.run`): start; supervise, stopping every rank with
grace (:meth:`Call.stop`: SIGTERM, then :meth:`Call.kill` after the grace period, by the rules of
:class:`~databricks.air._engine.supervision.Supervisor`) on the first failure, the timeout or an interrupt; collect
every rank's value or the call's error (:func:`~databricks.air._engine.failures.results_or_error`); close.

Anything that must look at the ranks before they are stopped belongs at the start of :meth:`Call.stop`, while
every rank it stops still runs: the supervisor (:attr:`Call.supervisor`) has marked stopping and its reason
(:attr:`~databricks.air._engine.supervision.Supervisor.stop_reason`) by then, and a second interrupt during it kills
at once.

Example::

    call = LocalCall(launch)      # or RayCall(launch)
    values = call.run()           # every rank's value, in rank order; or raises
"""

from __future__ import annotations

import abc
import dataclasses
import signal
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from databricks.air._engine.failures import results_or_error
from databricks.air._engine.outcome import RankOutcome, RankRecord
from databricks.air._engine.output import RankOutput, make_outputs
from databricks.air._engine.supervision import StopReason, Supervisor

if TYPE_CHECKING:
    from databricks.air.compute import AcceleratorType


@dataclasses.dataclass
class Launch:
    """Everything the engine needs for one call."""

    name: str
    """The function's name, for messages."""
    world_size: int
    function: bytes
    """The cloudpickled function."""
    arguments: bytes
    """``(args, kwargs)`` in :mod:`databricks.air._engine.values` format."""
    environ: Dict[str, str]
    """The caller's environment at call time (ranks on a Ray cluster get only its portable part)."""
    cwd: str
    sys_path: List[str]
    log_dir: str
    timeout: Optional[float] = None
    timeout_note: str = ""
    """Appended to the timeout message, e.g. how to change the limit."""
    show_all_ranks: bool = False
    start_method: str = "fork"
    """``fork``: ranks forked from the torch-preloaded rank server; ``spawn``: a new interpreter per rank."""
    grace_period: float = 3.0
    code_files: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Function name -> source file of code shipped by value, to mend rank tracebacks."""
    hints: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Text seen in the root cause's error or output -> advice added to the failure report."""
    remote: bool = False
    """Run the ranks on the connected Ray cluster instead of this machine."""
    accelerator_type: Optional["AcceleratorType"] = None
    """What each rank reserves on a Ray cluster (one GPU of that model, or one CPU); unused on this machine."""


class Call(abc.ABC):
    """The ranks of one call and what is known of them (see the module docstring for the contract)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.outcomes: Dict[int, RankOutcome] = {}
        """Every started rank's outcome, by rank."""
        self.outputs: Dict[int, RankOutput] = {}
        """Every rank's output (its log file, and the caller's streams for the ranks shown), by rank."""
        self.supervisor: Optional[Supervisor] = None
        """The stopping rules at work, while :meth:`supervise` runs."""
        self.stop_reason: Optional[StopReason] = None
        """Why the ranks were stopped, once supervision is over (``None``: they all ended on their own)."""

    # --- what each way of starting ranks implements ----------------------------------------------------------------

    @classmethod
    def prewarm(cls, environ: Dict[str, str]) -> None:
        """Get ready for a call that comes soon with this environment (so that it starts sooner); by default,
        nothing."""

    @abc.abstractmethod
    def start(self, deadline: Optional[float]) -> None:
        """Start every rank (``deadline``: a ``time.monotonic()`` time, or ``None``); fill :attr:`outcomes` and
        :attr:`outputs`."""

    @abc.abstractmethod
    def poll(self, seconds: float) -> None:
        """Wait up to ``seconds`` for news of the ranks; feed their output and record their exits."""

    @abc.abstractmethod
    def send(self, sig: int, ranks: Sequence[RankOutcome]) -> None:
        """Send ``sig`` to each of ``ranks`` and to every process it started."""

    @abc.abstractmethod
    def close(self) -> None:
        """Make sure nothing of this call survives (processes, files, reservations), whatever happened."""

    def drain(self) -> None:
        """Once every rank has ended: take in what is still on its way from them (output); by default, nothing."""

    # --- the same for every call -------------------------------------------------------------------------------------

    def running(self) -> List[RankOutcome]:
        return [outcome for outcome in self.outcomes.values() if outcome.running]

    def record_exit(self, rank: int, status: int, record: Optional[RankRecord]) -> None:
        """Rank ``rank`` ended with exit ``status``, leaving ``record`` (``None``: nothing)."""
        outcome = self.outcomes[rank]
        outcome.record = record
        outcome.exited_at = time.time()
        outcome.status = status  # last: a rank counts as ended only once all of this is known

    def stop(self) -> None:
        """Stop with grace: ask every running rank, and everything it started, to end (SIGTERM). The supervisor
        kills what still runs after the grace period."""
        running = self.running()
        now = time.time()
        for outcome in running:
            outcome.stopped_at = now
        self.send(signal.SIGTERM, running)

    def kill(self) -> None:
        """End every running rank, and everything it started, now (SIGKILL)."""
        self.send(signal.SIGKILL, self.running())

    def supervise(self, deadline: Optional[float]) -> None:
        """Wait until every rank has ended, stopping them all on the first failure, the deadline or an interrupt."""
        supervisor = self.supervisor = Supervisor(
            receive=self._receive,
            running=lambda: bool(self.running()),
            terminate=self.stop,
            kill=self.kill,
            grace_period=self.launch.grace_period,
        )
        try:
            supervisor.run(deadline)
        finally:
            self.stop_reason = supervisor.stop_reason
            # Its hooks hold this call, and the call holds every rank's value: let go, so that the values go as soon
            # as the caller drops them (not at the next garbage collection: they may be gigabytes).
            self.supervisor = None
        self.drain()

    def results(self) -> List[Any]:
        """Every rank's value in rank order, or the call's error (see ``failures.results_or_error``)."""
        launch = self.launch
        return results_or_error(
            self.outcomes.values(),
            self.stop_reason,
            name=launch.name,
            log_dir=launch.log_dir,
            timeout=launch.timeout,
            timeout_note=launch.timeout_note,
            code_files=launch.code_files,
            hints=launch.hints,
        )

    def run(self) -> List[Any]:
        """Start, supervise and collect; close whatever happens. The timeout bounds all of it."""
        timeout = self.launch.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self.start(deadline)
            self.supervise(deadline)
            return self.results()
        finally:
            self.close()

    def open_outputs(self, world_size: int) -> None:
        """One output per rank, logging to ``<log_dir>/rank_<r>.txt``."""
        self.outputs = make_outputs(self.launch.log_dir, world_size, self.launch.show_all_ranks)

    def close_outputs(self) -> None:
        """Show what is left of the ranks' output and close the log files."""
        for output in self.outputs.values():
            output.finish()

    def _receive(self, seconds: float) -> None:
        self.poll(seconds)
        if self.supervisor is not None and any(
            not outcome.running and not outcome.succeeded for outcome in self.outcomes.values()
        ):
            self.supervisor.stop()  # the first failure stops every rank (later calls change nothing)
