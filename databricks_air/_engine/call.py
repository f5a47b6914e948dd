"""One call's ranks behind one contract, however they are started: :class:`Call`, and what it is given, :class:`Launch`.

There is one implementation per way of starting processes, as torch elastic has one ``PContext`` per way:

* :class:`~databricks.air._engine.local_call.LocalCall`: ranks forked by a rank server on this machine;
* :class:`~databricks.air._ray.ray_call.RayCall`: ranks started by Ray actors on a cluster (``remote=True``).

:func:`databricks.air._engine.launch.call_class` chooses one. Each implementation says where its ranks run
(:attr:`Call.runs_here`), what it checks and gets ready before a call (:meth:`Call.check`, :meth:`Call.prewarm`),
and how to reach its ranks:

* :meth:`Call.start`: start every rank, within the deadline; each gets its :class:`RankOutcome` in
  :attr:`Call.outcomes` and its :class:`~databricks.air._engine.output.RankOutput` in :attr:`Call.outputs`;
* :meth:`Call.poll`: wait up to some seconds for news of the ranks (output, exits) and record it
  (:meth:`Call.record_exit`);
* :meth:`Call.send`: send a signal to some ranks and to every process each started;
* :meth:`Call.close`: make sure nothing of the call survives, whatever happened (also after a failed start).

and every call goes the same way, which lives here (:meth:`Call.run`): start; supervise, stopping every rank with
grace (:meth:`Call.stop`: SIGTERM, then :meth:`Call.kill` after the grace period, by the rules of
:class:`~databricks.air._engine.supervision.RankSupervisor`) on the first failure, the timeout or an interrupt; collect
every rank's value or the call's error (:func:`~databricks.air._engine.failures.results_or_error`); close.

Anything that must look at the ranks before they are stopped belongs at the start of :meth:`Call.stop`, while
every rank it stops still runs: the supervisor (:attr:`Call.supervisor`) has marked stopping and its reason
(:attr:`~databricks.air._engine.supervision.RankSupervisor.stop_reason`) by then, and a second interrupt during it kills
at once.

Example::

    call = LocalCall(launch)      # or RayCall(launch)
    values = call.run()           # every rank's value, in rank order; or raises
"""

from __future__ import annotations

import abc
import dataclasses
import secrets
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _settings
from databricks.air._call_folder import CallFolder, ReportFolder
from databricks.air._engine import snapshot, stall_watch, stop_report, straggler_watch
from databricks.air._engine.failures import results_or_error
from databricks.air._engine.outcome import RankOutcome, RankRecord
from databricks.air._engine.output import RankOutput, make_outputs
from databricks.air._engine.snapshot import GroupPosition, RankSnapshot
from databricks.air._engine.stop_report import StopReport
from databricks.air._engine.supervision import RankSupervisor, StopReason
from databricks.air._notices import PREFIX, notice

if TYPE_CHECKING:
    from databricks.air._engine.restarts import Restart
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
    argv: List[str]
    """The caller's ``sys.argv``: every rank sees it as its own, as every worker of ``torchrun script.py ARGS`` does."""
    log_dir: str
    timeout: Optional[float] = None
    deadline: Optional[float] = None
    """The ``time.monotonic()`` time by which the whole call ends (its set-up in the caller and every attempt
    included); ``None``: ``timeout`` seconds from when the engine starts it."""
    timeout_note: str = ""
    """Appended to the timeout message, e.g. how to change the limit."""
    show_all_ranks: bool = False
    start_method: str = "fork"
    """``fork``: ranks forked from the torch-preloaded rank server; ``spawn``: a new interpreter per rank."""
    grace_period: float = _settings.TERMINATE_GRACE_SECONDS.default
    hints: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Text seen in the root cause's error or output -> advice added to the failure report."""
    accelerator_type: Optional["AcceleratorType"] = None
    """What each rank reserves on a Ray cluster (one GPU of that model, or one CPU); unused on this machine."""
    snapshot_seconds: float = snapshot.DEFAULT_BUDGET
    """The budget of the snapshot taken before the ranks are stopped (``0``: none is taken)."""
    stall_seconds: float = stall_watch.DEFAULT_STALL_SECONDS
    """How long ranks may wait in a collective that another rank has not reached before a warning (``0``: never)."""
    straggler_seconds: float = 0.0
    """How often the straggler watch reads when each rank issued its collectives (``0``: never; see
    :mod:`~databricks.air._engine.straggler_watch`)."""
    on_stragglers: Optional[Callable[["straggler_watch.News"], None]] = None
    """Called with each window of the straggler watch (its figures, a straggler named or ended)."""
    on_report: Optional[Callable[[StopReport], None]] = None
    """Called with each report written (a stall's, the stop's), to keep it elsewhere too (the MLflow run)."""
    gpus: Sequence[str] = ()
    """The GPUs of this machine the call may lease, as ``CUDA_VISIBLE_DEVICES`` names them: it leases
    ``world_size`` of them before any rank starts (:mod:`~databricks.air._engine.gpu_leases`); empty for CPU ranks
    and on a Ray cluster."""
    on_queued: Optional[Callable[[str], None]] = None
    """Called once, with what it waits for, when the call must wait for GPUs that other calls hold."""
    on_lease: Optional[Callable[[Sequence[str]], None]] = None
    """Called with the GPUs the call leased, once it holds them."""
    on_started: Optional[Callable[[], None]] = None
    """Called once the call holds what it needs and its ranks are starting (after any wait)."""
    cancelled: Optional[threading.Event] = None
    """Set by another thread to cancel the call: a wait for GPUs ends at once, and running ranks are stopped as an
    interrupt stops them (the call then raises ``KeyboardInterrupt``)."""
    max_restarts: int = 0
    """How many times the ranks start again after a failure that is not the function's own (:mod:`.restarts`)."""
    restart_on: Tuple[type, ...] = ()
    """Exception classes raised by the function that restart the ranks all the same."""
    attempt: int = 0
    """Which attempt this is (``TORCHELASTIC_RESTART_COUNT``): 0, then 1 after the first restart..."""
    job_id: str = dataclasses.field(default_factory=lambda: f"databricks-air-{secrets.token_hex(6)}")
    """``TORCHELASTIC_RUN_ID``: one per call, the same in every attempt (as under torchrun)."""
    on_restart: Optional[Callable[["Restart"], None]] = None
    """Called before each restart, with what failed and why the ranks start again (to keep it in the run)."""
    show_live: Optional[Callable[[], bool]] = None
    """Whether the ranks' output is shown in the caller now (``None``: always): a call run in the background shows
    it only while someone waits for its result. The log files have all of it."""


class Call(abc.ABC):
    """The ranks of one call and what is known of them (see the module docstring for the contract)."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.folder = CallFolder(launch.log_dir)
        """The call's log folder."""
        self.outcomes: Dict[int, RankOutcome] = {}
        """Every started rank's outcome, by rank."""
        self.outputs: Dict[int, RankOutput] = {}
        """Every rank's output (its log file, and the caller's streams for the ranks shown), by rank."""
        self.supervisor: Optional[RankSupervisor] = None
        """The stopping rules at work, while :meth:`supervise` runs."""
        self.stop_reason: Optional[StopReason] = None
        """Why the ranks were stopped, once supervision is over (``None``: they all ended on their own)."""
        self.stop_report: Optional[StopReport] = None
        """Where the ranks were when stopping began (taken by :meth:`stop`), when a snapshot was taken."""
        self._stalls = stall_watch.StallWatch(launch.stall_seconds)
        self._stall_reports = 0
        self._next_stall_check = time.monotonic() + stall_watch.check_interval(launch.stall_seconds)
        self.straggler_watch = straggler_watch.StragglerWatch(
            launch.straggler_seconds, launch.log_dir, launch.world_size, launch.on_stragglers
        )

    # --- what each way of starting ranks implements ----------------------------------------------------------------

    runs_here: ClassVar[bool]
    """Whether the ranks run on this machine, the caller's: then they lease its GPUs (or run on simulated ones), reach
    the caller's MLflow metrics writer, and this machine's system metrics are theirs."""

    @classmethod
    def check(cls, environ: Mapping[str, str], start_method: str) -> None:
        """Raise :class:`RuntimeConfigurationError` for a setting in ``environ`` (or the start method) that this way
        of starting ranks cannot use; called before the call prints or records anything. By default, nothing."""

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

    def snapshot(self, ranks: Sequence[RankOutcome], budget: float) -> Dict[int, RankSnapshot]:
        """Where each of ``ranks`` is (stacks, collectives), within ``budget`` seconds, by rank; by default, nothing
        is known."""
        return {}

    def collectives(self, ranks: Sequence[RankOutcome], timeout: float) -> Dict[int, Optional[List[GroupPosition]]]:
        """How far each of ``ranks`` got in its collectives (``None``: it did not answer), cheaply, for the stall
        watch; by default, nothing is known."""
        return {}

    def issue_times(
        self, ranks: Sequence[RankOutcome], since: Dict[int, Dict[str, int]], timeout: float
    ) -> Dict[int, Optional[Dict[str, Any]]]:
        """When each of ``ranks`` issued its collectives after ``since`` (per rank, the last sequence number seen per
        group), for the straggler watch (``None``: it did not answer); by default, nothing is known."""
        return {}

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
        """Stop with grace: look where the running ranks are (:attr:`stop_report`), then ask each, and everything
        it started, to end (SIGTERM). The supervisor kills what still runs after the grace period; a second
        interrupt during the look kills at once."""
        running = self.running()
        reason = self._stop_reason_now()
        began = time.time()
        self.stop_report = self._snapshot_and_report(running, reason, self.folder.snapshot)
        # A rank that fails while the look takes its seconds has lost its peer to what stopped the call. After an
        # interrupt or at the timeout that is the stop's consequence, never the call's root cause (the call raises
        # KeyboardInterrupt, or the timeout); after a failure it is one more failure, listed as one.
        stopped_at = time.time() if reason is StopReason.FAILURE else began
        for outcome in running:
            outcome.stopped_at = stopped_at
        self.send(signal.SIGTERM, running)

    def kill(self) -> None:
        """End every running rank, and everything it started, now (SIGKILL)."""
        self.send(signal.SIGKILL, self.running())

    def supervise(self, deadline: Optional[float]) -> None:
        """Wait until every rank has ended, stopping them all on the first failure, the deadline or an interrupt."""
        supervisor = self.supervisor = RankSupervisor(
            receive=self._receive,
            running=lambda: bool(self.running()),
            terminate=self.stop,
            kill=self.kill,
            grace_period=self.launch.grace_period,
            cancelled=self.launch.cancelled,
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
            hints=launch.hints,
            stop_report=self.stop_report,
            live_ranks=range(launch.world_size) if launch.show_all_ranks else (0,),
        )

    def run(self) -> List[Any]:
        """Start, supervise and collect; close whatever happens. The timeout bounds all of it."""
        timeout = self.launch.timeout
        deadline = self.launch.deadline
        if deadline is None and timeout is not None:
            deadline = time.monotonic() + timeout
        try:
            self.start(deadline)
            self.supervise(deadline)
            return self.results()
        finally:
            self.close()

    def open_outputs(self, world_size: int) -> None:
        """One output per rank, logging to ``<log_dir>/rank_<r>.txt``."""
        self.outputs = make_outputs(self.launch.log_dir, world_size, self.launch.show_all_ranks, self.launch.show_live)

    def close_outputs(self) -> None:
        """Show what is left of the ranks' output and close the log files."""
        for output in self.outputs.values():
            output.finish()

    def _stop_reason_now(self) -> StopReason:
        reason = self.supervisor.stop_reason if self.supervisor is not None else None
        return reason if reason is not None else StopReason.FAILURE

    def _snapshot_and_report(
        self, running: Sequence[RankOutcome], reason: StopReason, folder: ReportFolder
    ) -> Optional[StopReport]:
        """Snapshot ``running`` and report on every rank (written to the log folder); ``None`` when there is no
        rank to look at, or snapshots are off."""
        budget = self.launch.snapshot_seconds
        if not running or budget <= 0:
            return None
        try:
            snapshots = self.snapshot(running, budget)
            if not snapshots:
                return None  # this way of starting ranks cannot look at them
            report = stop_report.build(reason, self.outcomes, snapshots, folder)
        except Exception as error:  # noqa: BLE001 - a failed look must never keep the ranks from being stopped
            notice(f"could not take a snapshot of the ranks: {error!r}")
            return None
        if reason is StopReason.INTERRUPT:  # shown before KeyboardInterrupt propagates
            print(report.text(), file=sys.stderr, flush=True)
        self._call_on_report(report)
        return report

    def _call_on_report(self, report: StopReport) -> None:
        if self.launch.on_report is not None and report.folder is not None:
            try:
                self.launch.on_report(report)
            except Exception as error:  # noqa: BLE001 - keeping it elsewhere is a nicety
                notice(f"could not keep the snapshot: {error!r}")

    def _watch_for_stalls(self) -> None:
        """Now and then, ask the ranks how far they got; warn once per stall (the call goes on)."""
        if not self._stalls.enabled or time.monotonic() < self._next_stall_check:
            return
        self._next_stall_check = time.monotonic() + stall_watch.check_interval(self.launch.stall_seconds)
        running = self.running()
        if len(running) < 1:
            return
        answers = self.collectives(running, timeout=1.0)
        if not answers:
            return  # this way of starting ranks cannot tell
        positions = [
            stall_watch.RankPosition(rank, ended=not outcome.running, groups=answers.get(rank))
            for rank, outcome in sorted(self.outcomes.items())
        ]
        stall = self._stalls.observe(positions, time.time())
        if stall is None:
            return
        self._stall_reports += 1
        report = self._snapshot_and_report(running, StopReason.STALL, self.folder.stall(self._stall_reports))
        warning = PREFIX + f"warning: {self.launch.name} looks stalled: {stall.describe()}."
        body = report.text() if report is not None else ""
        print(f"{warning}\n{body}".rstrip(), file=sys.stderr, flush=True)

    def _receive(self, seconds: float) -> None:
        self.poll(seconds)
        self._watch_for_stalls()
        self.straggler_watch.look_when_due(self)
        if self.supervisor is not None and any(
            not outcome.running and not outcome.succeeded for outcome in self.outcomes.values()
        ):
            self.supervisor.stop()  # the first failure stops every rank (later calls change nothing)
