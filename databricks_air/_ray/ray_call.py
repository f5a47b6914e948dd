"""A call whose ranks run on a Ray cluster (``remote=True``): the Ray implementation of
:class:`~databricks.air._engine.call.Call`, beside :class:`~databricks.air._engine.local_call.LocalCall`.

Same input (:class:`~databricks.air._engine.call.Launch`), same result: every rank's value in rank order, or the
same :class:`DistributedExecutionError` report, :class:`LocalExecutionTimeoutError` or ``KeyboardInterrupt``. The
ranks' output lands in the same per-rank log files, with rank 0 shown live.

Starting: check that the cluster can ever hold the ranks; reserve a placement group (one bundle per rank, packed by
node); start one :class:`RankHost` actor in each bundle; number the ranks from where Ray put them; start every rank
with its torchrun environment. Then the call polls the hosts for output and exits, signals ranks through their
hosts, and on closing kills the actors and removes the placement group, so nothing of the call stays on the cluster.

Remote ranks run with their node's environment, the job's ``runtime_env`` (``env_vars`` included), the torchrun
variables, and the caller's variables of the families listed in :mod:`.forwarded_environ` (MLflow's run, our
switches, accelerate's settings with ``ACCELERATE_USE_CPU`` for CPU ranks): not the caller's whole environment,
whose paths mean nothing on another machine.
"""

from __future__ import annotations

import signal
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from databricks.air import _variables
from databricks.air._engine.call import Call, Launch
from databricks.air._engine.outcome import RankOutcome, RankRecord, read_record
from databricks.air._engine.rank_environ import flight_recorder_environ, job_environ
from databricks.air._engine.snapshot import GroupPosition, RankSnapshot
from databricks.air._ray import clock_offsets, placement, resources, session
from databricks.air._ray.forwarded_environ import forwarded_environ
from databricks.air._ray.host_polls import HostPolls, first_line
from databricks.air._ray.rank_host import RankHost
from databricks.air._ray.rank_layout import Place, Slot, arrange, rank_environ
from databricks.air._ray.request import RankRequest
from databricks.air._ray.require import import_ray
from databricks.air.exceptions import LocalExecutionTimeoutError, WorkloadCreationError
from databricks.air._notices import notice

_POLL_SECONDS = 0.5
_CLOSE_SECONDS = 5.0


class RayCall(Call):
    """The ranks of one call on the cluster, and what is known of them."""

    runs_here = False

    def __init__(self, launch: Launch) -> None:
        super().__init__(launch)
        if launch.accelerator_type is None:
            raise ValueError("a call on Ray needs the accelerator type of its ranks (Launch.accelerator_type)")
        self.ray = import_ray()
        self.request = RankRequest(launch.world_size, launch.accelerator_type)
        self.group: Any = None
        self.bundle: Dict[str, float] = {}
        self.hosts: List[Any] = []  # by bundle
        self.places: List[Place] = []  # by rank
        self.polls = HostPolls(_POLL_SECONDS)  # by rank
        self.clocks: Optional[Tuple[Dict[int, float], str]] = None  # each rank's clock offset, once measured

    # --- starting ------------------------------------------------------------------------------------------------

    def start(self, deadline: Optional[float]) -> None:
        """Connect (to ``RAY_ADDRESS``, unless this process is connected), reserve, start the hosts and the ranks."""
        session.ensure_connected()
        self.reserve(self.request.bundle(*resources.cluster_resources(self.ray)), deadline)
        self.start_hosts(deadline)
        self.start_ranks(deadline)

    def reserve(self, bundle: Dict[str, float], deadline: Optional[float]) -> None:
        self.bundle = bundle
        what = f"{self.request.count} {self.request.unit}(s)"
        self.group = placement.reserve(
            self.launch.name, bundle, self.request.count, what, deadline, self.launch.timeout_note
        )

    def start_hosts(self, deadline: Optional[float]) -> None:
        for host in placement.start_actors(
            self.ray,
            RankHost,
            self.group,
            self.bundle,
            self.request.count,
            max_concurrency=3,  # a stop, or a look at the rank (a snapshot), must not wait behind a poll
            # Merged into the job's runtime_env; the caller has shown the Beta notice already.
            runtime_env={"env_vars": {_variables.BETA_NOTICE_SHOWN: "1"}},
        ):
            self.hosts.append(host)
        where = self._get_all([host.where.remote() for host in self.hosts], deadline, "start the rank hosts")
        self.places = arrange([Slot(w["node_id"], w["node_ip"], tuple(w["gpu_ids"])) for w in where])

    def start_ranks(self, deadline: Optional[float]) -> None:
        launch = self.launch
        master = self.hosts[self.places[0].bundle]
        (master_port,) = self._get_all([master.free_port.remote()], deadline, "pick a port for MASTER_PORT")
        forwarded = forwarded_environ(launch.environ, launch.cwd)
        common = {
            **forwarded,
            **job_environ(launch.job_id, launch.attempt, launch.max_restarts),
            **flight_recorder_environ(forwarded, None),
        }
        function, arguments = self.ray.put(launch.function), self.ray.put(launch.arguments)
        self.open_outputs(len(self.places))
        starts = [
            self.hosts[place.bundle].start.remote(
                place.rank,
                len(self.places),
                {**common, **rank_environ(self.places, place.rank, master_port)},
                function,
                arguments,
                launch.argv,
            )
            for place in self.places
        ]
        pids = self._get_all(starts, deadline, "start the ranks")
        for place, pid in zip(self.places, pids):
            log_path = self.outputs[place.rank].log_path
            self.outcomes[place.rank] = RankOutcome(rank=place.rank, pid=pid, log_path=log_path)
        notice(f"{self._describe_places()}")

    def _get_all(self, refs: List[Any], deadline: Optional[float], doing: str) -> List[Any]:
        """``ray.get(refs)`` within the call's timeout; a Ray failure here means the cluster could not do ``doing``."""
        waiting = list(refs)
        while waiting:
            step = _POLL_SECONDS if deadline is None else max(0.0, min(_POLL_SECONDS, deadline - time.monotonic()))
            _, waiting = self.ray.wait(waiting, num_returns=len(waiting), timeout=step)
            if waiting and deadline is not None and time.monotonic() >= deadline:
                raise LocalExecutionTimeoutError(
                    f"{self.launch.name}: the Ray cluster could not {doing} within the timeout of "
                    f"{self.launch.timeout:g} s, so the call was stopped. {self.launch.timeout_note}"
                )
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayError as error:
            raise WorkloadCreationError(f"the Ray cluster could not {doing} for {self.launch.name}: {error}") from error

    def _describe_places(self) -> str:
        nodes: Dict[int, List[int]] = {}
        for place in self.places:
            nodes.setdefault(place.node_rank, []).append(place.rank)
        shown = ", ".join(
            f"node {node} {self.places[ranks[0]].slot.node_ip} (ranks {ranks[0]}-{ranks[-1]})"
            if len(ranks) > 1
            else f"node {node} {self.places[ranks[0]].slot.node_ip} (rank {ranks[0]})"
            for node, ranks in nodes.items()
        )
        return f"{len(self.places)} {self.request.unit} rank(s) of {self.launch.name} on Ray: {shown}"

    # --- waiting -------------------------------------------------------------------------------------------------

    def poll(self, seconds: float) -> None:
        # An interrupt may land anywhere in here: a rank whose poll was taken but not handled is polled again (its
        # exit status stays with its host, so only some output can be lost, and only then).
        polled = self.polls.polled()
        for outcome in self.running():
            if outcome.rank not in polled:
                self.polls.ask(outcome.rank, self._host(outcome.rank))
        for rank, report in self.polls.answers(self.ray, seconds):
            if isinstance(report, BaseException):
                self._host_lost(rank, report)
                continue
            for stream, data in report["output"]:
                self.outputs[rank].feed(stream, data)
            if report["status"] is not None:
                self.record_exit(rank, report["status"], read_record(report["result"], rank))

    def _host_lost(self, rank: int, error: BaseException) -> None:
        """The rank's actor died (its node was lost, or Ray killed it): the rank is gone with it."""
        what = f"its Ray actor on {self.places[rank].slot.node_ip} died ({first_line(error)})"
        self.record_exit(rank, -signal.SIGKILL, RankRecord.host_lost(what))

    def _host(self, rank: int) -> Any:
        return self.hosts[self.places[rank].bundle]

    # --- looking at the ranks ------------------------------------------------------------------------------------

    def snapshot(self, ranks: Sequence[RankOutcome], budget: float) -> Dict[int, RankSnapshot]:
        """Each rank's snapshot, taken by its host on the rank's node, all at once."""
        asked = {outcome.rank: self._host(outcome.rank).snapshot.remote(budget) for outcome in ranks}
        answers = self._answers(asked, budget + 1.0)
        taken: Dict[int, RankSnapshot] = {}
        for outcome in ranks:
            answer = answers.get(outcome.rank)
            if isinstance(answer, RankSnapshot):
                taken[outcome.rank] = answer
            else:
                reason = answer if isinstance(answer, str) else "its host on the node did not answer in time"
                taken[outcome.rank] = RankSnapshot(outcome.rank, outcome.pid, time.time(), sources={"snapshot": reason})
        return taken

    def collectives(self, ranks: Sequence[RankOutcome], timeout: float) -> Dict[int, Optional[List[GroupPosition]]]:
        asked = {outcome.rank: self._host(outcome.rank).collectives.remote(timeout) for outcome in ranks}
        answers = self._answers(asked, timeout + 1.0)
        return {rank: answer if isinstance(answer, list) else None for rank, answer in answers.items()}

    def issue_times(
        self, ranks: Sequence[RankOutcome], since: Dict[int, Dict[str, int]], timeout: float
    ) -> Dict[int, Optional[Dict[str, Any]]]:
        """As on this machine, asked by each rank's host on its node; each answer says how far the rank's clock is
        from the caller's (``clock_offset``), measured at the first look (:mod:`~databricks.air._ray.clock_offsets`)."""
        if self.clocks is None:
            self.clocks = clock_offsets.measure(self.ray, {o.rank: self._host(o.rank) for o in ranks})
        offsets, note = self.clocks
        asked = {o.rank: self._host(o.rank).times.remote(since.get(o.rank, {}), timeout) for o in ranks}
        answers: Dict[int, Optional[Dict[str, Any]]] = {}
        for rank, answer in self._answers(asked, timeout + 1.0).items():
            if isinstance(answer, dict):
                answers[rank] = {**answer, "clock_offset": offsets.get(rank, 0.0), "clock_note": note}
            else:
                answers[rank] = None
        return answers

    def _answers(self, asked: Dict[int, Any], seconds: float) -> Dict[int, Any]:
        """What each rank's host answered within ``seconds`` (a failed host answers with the reason, in words)."""
        ready, _ = self.ray.wait(list(asked.values()), num_returns=len(asked), timeout=seconds)
        done = set(ready)
        answers: Dict[int, Any] = {}
        for rank, ref in asked.items():
            if ref not in done:
                continue
            try:
                answers[rank] = self.ray.get(ref)
            except self.ray.exceptions.RayError as error:
                answers[rank] = (
                    f"its host failed: {str(error).strip().splitlines()[0] if str(error).strip() else error!r}"
                )
        return answers

    # --- stopping and ending -------------------------------------------------------------------------------------

    def send(self, sig: int, ranks: Sequence[RankOutcome]) -> None:
        for outcome in ranks:
            self._host(outcome.rank).stop.remote(sig)

    def close(self) -> None:
        """Make sure nothing of this call survives on the cluster, whatever happened."""
        try:
            closing = [host.close.remote() for host in self.hosts]
            if closing:
                self.ray.wait(closing, num_returns=len(closing), timeout=_CLOSE_SECONDS)
        except Exception:  # noqa: BLE001 - the hosts may be gone already; killing them below is what counts
            pass
        finally:
            placement.dismantle(self.ray, self.hosts, self.group)
            self.close_outputs()
