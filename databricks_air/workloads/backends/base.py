"""The two seams between the workload command and where it runs.

:class:`Backend` is what :mod:`..runs` (and so the CLI) talks to: does the workload fit (:meth:`Backend.plan`),
hand a prepared run over (:meth:`Backend.start`), ask it to stop (:meth:`Backend.request_cancel`), and bring the
registry's state up to date for readers (:meth:`Backend.reconcile`, :meth:`Backend.sync_logs`). The CLI knows
nothing of processes; a backend knows nothing of argument parsing.

:class:`NodeLauncher` is what the backend-independent :class:`~..supervisor.Supervisor` (retries, timeout, cancel,
MLflow runs, alerts, state) uses to run one attempt: start the command once per node, each with its own
environment and output sink, and give back a :class:`NodeGroup` to wait on or stop. The local backend's launcher
starts one keeper process (:mod:`.keeper`) on this machine; a Ray backend's would start one per node of a placement
group, from a supervisor that runs as the Ray job's entrypoint.
"""

from __future__ import annotations

import abc
import dataclasses
import signal
from typing import Any, ClassVar, Dict, List, Optional, Sequence

from databricks.air.workloads.node_output import NodeOutput
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import NodePlan, RunState
from databricks.air.workloads.workload import Workload


class Backend(abc.ABC):
    """Where runs go: chosen by name (:func:`databricks.air.workloads.backends.get`), recorded in each run's spec."""

    name: ClassVar[str]

    @abc.abstractmethod
    def plan(self, workload: Workload) -> NodePlan:
        """How the workload would run here, or an :class:`~..errors.UnsupportedHere` saying why it cannot (too
        many nodes, a container image...). Called before anything is recorded."""

    def notes(self, workload: Workload, plan: NodePlan) -> List[str]:
        """Lines for stderr at submission (a GPU model other than the one asked for, fields unused here...)."""
        return []

    @abc.abstractmethod
    def start(self, folder: RunFolder) -> None:
        """Hand over a run whose folder holds its spec, configuration, snapshot and ``PENDING`` state; return once
        whatever owns the run from now on is started (the registry's ``owner`` says who)."""

    @abc.abstractmethod
    def request_cancel(self, folder: RunFolder, state: RunState) -> None:
        """Ask the run's owner to stop it (asynchronous: the owner records ``CANCELED`` once everything stopped)."""

    @abc.abstractmethod
    def reconcile(self, folder: RunFolder, state: RunState) -> RunState:
        """For an active run, the state as it really is: a run whose owner is gone must not read ``RUNNING``."""

    def sync_logs(self, folder: RunFolder, state: RunState) -> None:
        """Make the node logs of the run present in its folder (remote backends fetch them; local ones have them)."""


@dataclasses.dataclass
class AttemptLaunch:
    """One attempt, as the supervisor hands it to a launcher."""

    number: int
    script: str
    """The command, as a file (``bash -euo pipefail SCRIPT``)."""
    cwd: str
    """``CODE_SOURCE_PATH``."""
    environs: List[Dict[str, str]]
    """The complete environment of each node's command, node 0 first."""
    outputs: List[NodeOutput]
    """Where each node's output goes."""
    grace_seconds: float


class NodeGroup(abc.ABC):
    """The command, running once per node for one attempt."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> Optional[List[int]]:
        """Each node's exit code (0-255; 128 + N for a signal) once every node has ended and its output is in;
        ``None`` if that did not happen within ``timeout`` seconds. The first node to fail stops the others."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every node's processes (SIGTERM, SIGKILL after the grace period); return once none is left."""

    def owner(self) -> Dict[str, Any]:
        """What the registry records of the running attempt (pids, a job id), for ``get`` and for clean-up."""
        return {}


class NodeLauncher(abc.ABC):
    """Starts an attempt's nodes."""

    @abc.abstractmethod
    def start(self, launch: AttemptLaunch) -> NodeGroup:
        """Start the command on every node; raise if that is impossible (the supervisor fails the attempt)."""

    @abc.abstractmethod
    def node_address(self) -> str:
        """``MASTER_ADDR``: the address of node 0, as the nodes reach it."""

    @abc.abstractmethod
    def free_port(self) -> int:
        """``MASTER_PORT``: a port free on node 0."""


def exit_codes_summary(codes: Sequence[int]) -> str:
    """``exit code 3`` / ``node 1: exit code 137 (SIGKILL)``, for messages."""
    failed = [(node, code) for node, code in enumerate(codes) if code != 0]
    if not failed:
        return "exit code 0"
    parts = []
    for node, code in failed:
        text = f"exit code {code}"
        if code > 128:
            try:
                text += f" ({signal.Signals(code - 128).name})"
            except ValueError:
                pass
        parts.append(text if len(codes) == 1 else f"node {node}: {text}")
    return "; ".join(parts)
