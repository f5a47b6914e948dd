"""The two seams between the workload command and where it runs.

:class:`Backend` is what :mod:`..runs` (and so the CLI) talks to: does the workload fit (:meth:`Backend.plan`),
hand a prepared run over (:meth:`Backend.start`), ask it to stop (:meth:`Backend.request_cancel`), and bring the
registry's state up to date for readers (:meth:`Backend.reconcile`, :meth:`Backend.following`). The CLI knows
nothing of processes; a backend knows nothing of argument parsing.

:class:`NodeLauncher` is what the backend-independent :class:`~..supervisor.WorkloadSupervisor` (retries, timeout,
cancel, MLflow runs, alerts, state) uses to run one attempt: reserve the attempt's nodes
(:meth:`NodeLauncher.reserve`), learn node 0's address and a port free there, start the command once per node, each
with its own environment and output sink, then wait on the :class:`NodeGroup` or stop it, and close it. The local
backend's launcher runs one keeper process (:mod:`.keeper`) on this machine; the Ray backend's (:mod:`.ray_nodes`)
reserves a placement group of one bundle per node and runs a keeper on each, from a supervisor that runs as the Ray
job's entrypoint.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import signal
from typing import Any, Callable, ClassVar, ContextManager, Dict, List, Mapping, Optional, Sequence

from databricks.air.workloads.errors import WorkloadError
from databricks.air.workloads.node_environment import NodeVariables
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
        """For an active run, the state as it really is: a run whose owner is gone must not read ``RUNNING``. A
        remote backend also brings the run's node logs into its folder here."""

    def following(self, folder: RunFolder) -> ContextManager[None]:
        """Held while a reader follows the run (``logs``, ``run --watch``): a remote backend streams the run's state
        and output into its folder meanwhile, so that reading the folder is enough."""
        return contextlib.nullcontext()


@dataclasses.dataclass
class AttemptLaunch:
    """One attempt, as the supervisor hands it to a node group."""

    number: int
    script: str
    """The command, as a file (``bash -euo pipefail SCRIPT``)."""
    cwd: str
    """``CODE_SOURCE_PATH``."""
    base_environ: Dict[str, str]
    """What each node's environment is built on where the supervisor runs (a remote node uses its own)."""
    nodes: List[NodeVariables]
    """What the runtime sets on each node, node 0 first."""
    outputs: List[NodeOutput]
    """Where each node's output goes."""
    grace_seconds: float
    dependencies: Optional[List[str]] = None
    """``environment.dependencies``, where the launcher's nodes get them themselves (:attr:`installs_dependencies`)."""

    def environ(self, node: int, base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The complete environment of node ``node``'s command, on ``base`` (default: :attr:`base_environ`)."""
        return self.nodes[node].environ(self.base_environ if base is None else base)


class NodeGroup(abc.ABC):
    """The nodes of one attempt: reserved, then running the command once per node."""

    @abc.abstractmethod
    def master_address(self) -> str:
        """``MASTER_ADDR``: the address of node 0, as the other nodes reach it."""

    @abc.abstractmethod
    def master_port(self) -> int:
        """``MASTER_PORT``: a port free on node 0 now."""

    @abc.abstractmethod
    def start(self, launch: AttemptLaunch) -> None:
        """Start the command on every node; raise if that is impossible (the supervisor fails the attempt)."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> Optional[List[int]]:
        """Each node's exit code (0-255; 128 + N for a signal) once every node has ended and its output is in;
        ``None`` if that did not happen within ``timeout`` seconds. The first node to fail stops the others."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every node's processes (SIGTERM, SIGKILL after the grace period); return once none is left."""

    def close(self) -> None:
        """Give back what :meth:`NodeLauncher.reserve` took (called once, however the attempt ended)."""

    def failure(self) -> Optional[str]:
        """Once :meth:`wait` has the exit codes: why the attempt failed, where that is not the command's doing (a
        keeper that was killed); ``None`` otherwise."""
        return None

    def owner(self) -> Dict[str, Any]:
        """What the registry records of the running attempt (pids, a placement group), for ``get`` and clean-up."""
        return {}


class NodeLauncher(abc.ABC):
    """Reserves an attempt's nodes."""

    reserves_nodes: ClassVar[bool] = False
    """Whether :meth:`reserve` may wait for capacity (the supervisor then says that it is placing the nodes)."""
    installs_dependencies: ClassVar[bool] = False
    """Whether the nodes get ``environment.dependencies`` themselves (on Ray: the job's runtime environment), else
    the supervisor installs them where it runs."""

    @abc.abstractmethod
    def reserve(
        self,
        plan: NodePlan,
        deadline: Optional[float],
        interrupted: Callable[[], bool],
        say: Callable[[str], None] = lambda text: None,
    ) -> Optional[NodeGroup]:
        """The attempt's nodes, placed: waiting for capacity until ``deadline`` (a ``time.monotonic()`` value,
        then :class:`TimeoutError`) or until ``interrupted()`` (then ``None``); :class:`CannotPlace` if they never
        can be placed, any other error if not now. ``say`` tells the run what it is doing now, when that changes
        on the way (the nodes placed, their dependencies being installed)."""


class CannotPlace(WorkloadError):
    """The nodes a workload asks for can never be placed where it runs: retrying cannot help."""


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
