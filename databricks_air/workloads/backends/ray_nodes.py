"""The Ray backend's :class:`~.base.NodeLauncher`, used by the supervisor that runs as the Ray job's entrypoint.

Each attempt reserves a placement group of one bundle per node (:mod:`.ray_node_request`), spread over distinct Ray
nodes (``STRICT_SPREAD``), created whole or not at all and waited for within the attempt's timeout; it starts one
:class:`~.ray_node_host.NodeHost` actor in each bundle (bundle 0's node is node 0: ``MASTER_ADDR``, and
``MASTER_PORT`` is a port free there), with ``environment.dependencies`` as its runtime environment's ``pip`` list
(which Ray installs on each node before the actor starts: pip failing there fails the run, without retries), starts
the command on every node, and polls them for output and exit statuses. The first node that fails stops the others.
Closing the attempt kills its actors and removes its placement group, so a retry is placed anew and nothing of an
attempt stays on the cluster; a supervisor that dies takes them with it too (Ray ends the actors and placement
groups of a job whose driver is gone, and each node's keeper then stops its command). The placement group, the
actors and the polls are the Ray parts' (:mod:`databricks.air._ray.placement`,
:mod:`databricks.air._ray.host_polls`), shared with ``remote=True``.
"""

from __future__ import annotations

import math
import signal
import time
from typing import Any, Callable, Dict, List, Optional

from databricks.air._ray import placement, resources
from databricks.air._ray.host_polls import HostPolls, first_line
from databricks.air._ray.require import import_ray
from databricks.air.workloads import environments
from databricks.air.workloads.backends import ray_package
from databricks.air.workloads.backends.base import AttemptLaunch, NodeGroup, NodeLauncher
from databricks.air.workloads.backends.ray_node_host import NodeHost
from databricks.air.workloads.backends.ray_node_request import STRATEGY, NodeRequest
from databricks.air.workloads.run_state import NodePlan

_POLL_SECONDS = 0.2
_CLOSE_EXTRA_SECONDS = 10.0
_LOST = 128 + signal.SIGKILL  # the exit status of a node whose actor died


class RayNodes(NodeLauncher):
    """The nodes of each attempt, from the Ray cluster this process is the driver of."""

    reserves_nodes = True
    installs_dependencies = True

    def __init__(self, root: str, accelerator_type: str, name: str) -> None:
        self.ray = import_ray()
        self.root = root
        """The job's working directory on this node (each node has its own copy)."""
        self.accelerator_type = accelerator_type
        self.name = name
        self.pip = ray_package.read_pip_field(root)
        """``environment.dependencies`` as the hosts' runtime environment ``pip`` field (``None``: none)."""

    def reserve(
        self,
        plan: NodePlan,
        deadline: Optional[float],
        interrupted: Callable[[], bool],
        say: Callable[[str], None] = lambda text: None,
    ) -> Optional[NodeGroup]:
        request = NodeRequest(plan, self.accelerator_type)
        bundle = request.bundle(*resources.cluster_resources(self.ray))
        group = placement.create(bundle, plan.num_nodes, STRATEGY, name=self.name)
        hosts: List[Any] = []
        try:
            if not self._wait(lambda step: group.wait(step), deadline, interrupted, request.what):
                placement.release(group)
                return None
            options: Dict[str, Any] = dict(max_concurrency=4)  # a stop must not wait behind a poll
            if self.pip is not None:  # merged into the job's: the working directory and variables stay
                options["runtime_env"] = {"pip": self.pip}
                # Ray builds each host's environment before the host starts: minutes, for a big list
                say(f"installing environment.dependencies on {plan.num_nodes} node(s) (Ray's runtime environment)")
            for host in placement.start_actors(self.ray, NodeHost, group, bundle, plan.num_nodes, **options):
                hosts.append(host)
            pending = [host.where.remote() for host in hosts]
            if not self._wait(
                lambda step: not self.ray.wait(pending, num_returns=len(pending), timeout=step)[1],
                deadline,
                interrupted,
                "the nodes' hosts to start",
            ):
                RayNodeGroup(self.ray, self.root, group, hosts, []).close()
                return None
            return RayNodeGroup(self.ray, self.root, group, hosts, self._where(pending))
        except BaseException:
            RayNodeGroup(self.ray, self.root, group, hosts, []).close()
            raise

    def _where(self, pending: List[Any]) -> List[Dict[str, Any]]:
        """Each started host's :meth:`~.NodeHost.where`; a host whose runtime environment Ray could not build (pip
        failed on its node) fails the attempt for good, naming the node and pip's errors."""
        found = []
        for node, ref in enumerate(pending):
            try:
                found.append(self.ray.get(ref))
            except self.ray.exceptions.RuntimeEnvSetupError as error:
                raise environments.DependencyInstallError(
                    ray_package.install_failure(str(error), f"on node {node}")
                ) from None
        return found

    def _wait(
        self, ready: Callable[[float], bool], deadline: Optional[float], interrupted: Callable[[], bool], what: str
    ) -> bool:
        """Wait until ``ready(step)``; False when interrupted, :class:`TimeoutError` past the deadline."""
        while True:
            step = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            if ready(math.ceil(step) if step >= 1 else step):
                return True
            if interrupted():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"the Ray cluster did not place {what} within the attempt's timeout")


class RayNodeGroup(NodeGroup):
    """One attempt's placement group and node hosts."""

    def __init__(self, ray: Any, root: str, group: Any, hosts: List[Any], where: List[Dict[str, Any]]) -> None:
        self.ray = ray
        self.root = root
        self.group = group
        self.hosts = hosts
        self.where = where
        self.launch: Optional[AttemptLaunch] = None
        self.codes: List[Optional[int]] = [None] * len(hosts)
        self.polls = HostPolls(_POLL_SECONDS)  # by node
        self._stopping = False

    def master_address(self) -> str:
        return str(self.where[0]["node_ip"])

    def master_port(self) -> int:
        return int(self.ray.get(self.hosts[0].master_port.remote()))

    def start(self, launch: AttemptLaunch) -> None:
        self.launch = launch
        with open(launch.script, encoding="utf-8") as stream:
            command = stream.read()
        self.ray.get(
            [
                host.start.remote(self.root, command, launch.nodes[node], launch.grace_seconds, launch.dependencies)
                for node, host in enumerate(self.hosts)
            ]
        )

    def wait(self, timeout: float) -> Optional[List[int]]:
        self._poll(timeout)
        if all(code is not None for code in self.codes):
            return [int(code) for code in self.codes]  # type: ignore[arg-type]
        return None

    def _poll(self, timeout: float) -> None:
        for node, host in enumerate(self.hosts):
            if self.codes[node] is None and node not in self.polls.polled():
                self.polls.ask(node, host)
        if not self.polls.pending:
            return
        for node, report in self.polls.answers(self.ray, timeout):
            if isinstance(report, BaseException):
                self._lost(node, report)
                continue
            if report["output"] and self.launch is not None:
                self.launch.outputs[node].feed(report["output"])
            if report["status"] is not None:
                self.codes[node] = int(report["status"])
                if self.codes[node] != 0 and not self._stopping:
                    self._stop_all()  # the first node that fails stops the others

    def _lost(self, node: int, error: BaseException) -> None:
        if self.launch is not None:
            self.launch.outputs[node].write_note(
                f"[air] node {node}'s Ray actor on {self.where[node]['node_ip']} died ({first_line(error)})"
            )
        self.codes[node] = _LOST
        if not self._stopping:
            self._stop_all()

    def _stop_all(self) -> None:
        self._stopping = True
        for node, host in enumerate(self.hosts):
            if self.codes[node] is None:
                host.stop.remote()

    def stop(self) -> None:
        self._stop_all()
        grace = self.launch.grace_seconds if self.launch is not None else 0.0
        deadline = time.monotonic() + grace + _CLOSE_EXTRA_SECONDS
        while any(code is None for code in self.codes) and time.monotonic() < deadline:
            self._poll(_POLL_SECONDS)

    def close(self) -> None:
        """Stop what still runs, kill the actors, remove the placement group: nothing of the attempt is left."""
        grace = self.launch.grace_seconds if self.launch is not None else 0.0
        try:
            closing = [host.close.remote(grace + _CLOSE_EXTRA_SECONDS) for host in self.hosts]
            if closing:
                self.ray.wait(closing, num_returns=len(closing), timeout=grace + 2 * _CLOSE_EXTRA_SECONDS)
        except Exception:  # noqa: BLE001 - hosts that are gone already; killing them below is what counts
            pass
        finally:
            placement.dismantle(self.ray, self.hosts, self.group)

    def owner(self) -> Dict[str, Any]:
        return {
            "placement_group": self.group.id.hex(),
            "nodes": [{"node_ip": w["node_ip"], "node_id": w["node_id"]} for w in self.where],
        }
