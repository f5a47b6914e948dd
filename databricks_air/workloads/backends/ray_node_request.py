"""What a workload's nodes ask of a Ray cluster: how many (:func:`node_plan`), and one placement-group bundle per
node, on distinct Ray nodes (:class:`NodeRequest`).

A node of the workload is one bundle of the node's accelerators: ``{"GPU": 8, "accelerator_type:H100": 0.001}``
for ``GPU_8xH100`` (Ray's accelerator-type resource selects nodes of that model, as for ``remote=True``:
:mod:`databricks.air._ray.resources`), or ``{"CPU": n}`` for CPU ranks. The bundles are spread over distinct Ray
nodes (``STRICT_SPREAD``): the command runs once per machine, as upstream runs it. Whether the cluster can ever
hold them is checked before anything is started (on the submitting machine with the nodes that are up; in the
supervisor also against what an autoscaling cluster may grow to), and a request that cannot be met says what the
cluster has.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence

from databricks.air._ray import placement, resources
from databricks.air._ray.resources import ACCELERATOR_RESOURCE_PREFIX, describe_nodes
from databricks.air.compute import AcceleratorType
from databricks.air.workloads.backends.base import CannotPlace
from databricks.air.workloads.errors import InvalidArguments
from databricks.air.workloads.run_state import NodePlan

STRATEGY = placement.STRICT_SPREAD


@dataclasses.dataclass(frozen=True)
class NodeRequest:
    """The nodes of one attempt, as the cluster is asked for them."""

    plan: NodePlan
    accelerator_type: str
    """The workload's ``compute.accelerator_type`` (for GPU nodes: which model)."""

    @property
    def unit(self) -> str:
        return "CPU" if self.plan.cpu else "GPU"

    @property
    def what(self) -> str:
        """``2 nodes of 2 CPUs``, for messages."""
        count, per_node = self.plan.num_nodes, self.plan.local_world_size
        return f"{count} node(s) of {per_node} {self._model()}{self.unit}(s)"

    def _model(self) -> str:
        if self.plan.cpu:
            return ""
        model = AcceleratorType(self.accelerator_type).gpu_type
        return f"{model.name} " if model is not None else ""

    def bundle(
        self, nodes: Sequence[Mapping[str, Any]], max_resources: Optional[Mapping[str, float]] = None
    ) -> Dict[str, float]:
        """One node's bundle on this cluster; :class:`CannotPlace` if the cluster can never hold every node.

        ``nodes`` is :func:`ray.nodes`; ``max_resources`` what an autoscaling cluster may grow to, where known.
        """
        alive = resources.alive(nodes)
        bundle: Dict[str, float] = {self.unit: float(self.plan.local_world_size)}
        if not self.plan.cpu:
            bundle[self._accelerator(alive, max_resources or {})] = resources.ACCELERATOR_AMOUNT
        fitting = [node for node in alive if _holds(node.get("Resources", {}), bundle)]
        if len(fitting) >= self.plan.num_nodes:
            return bundle
        if max_resources and all(
            max_resources.get(key, 0) >= amount * self.plan.num_nodes for key, amount in bundle.items()
        ):
            return bundle  # the autoscaler may add the nodes; the placement group waits for them
        raise CannotPlace(self._too_many(len(fitting), alive))

    def _too_many(self, fitting: int, alive: Sequence[Mapping[str, Any]]) -> str:
        if self.plan.cpu:
            hint = "Ask for fewer nodes (--nodes, a divisor of compute.num_accelerators) or fewer CPU ranks"
        else:
            hint = "Ask for fewer accelerators (compute.num_accelerators)"
        return (
            f"compute: the workload needs {self.what}, each on a Ray node of its own ({STRATEGY}), and "
            f"{fitting} node(s) of the Ray cluster can hold one. Cluster: {describe_nodes(alive)}. {hint}, or "
            "add nodes to the cluster."
        )

    def _accelerator(self, alive: Sequence[Mapping[str, Any]], max_resources: Mapping[str, float]) -> str:
        """The accelerator-type resource of the nodes' GPUs: of the names Ray gives them, the one most nodes have."""
        model = AcceleratorType(self.accelerator_type).gpu_type
        found = resources.accelerator_resource(model, alive, max_resources, lambda node: 1)
        if found is None:
            names = resources.ray_names(model)
            raise CannotPlace(
                f"compute.accelerator_type: {self.accelerator_type} needs Ray nodes whose GPUs Ray names "
                f"{' or '.join(names)} (resource {ACCELERATOR_RESOURCE_PREFIX}{names[0]}), and the Ray cluster has "
                f"none. Cluster: {describe_nodes(alive)}."
            )
        return found


def _holds(resources: Mapping[str, float], bundle: Mapping[str, float]) -> bool:
    return all(float(resources.get(key, 0)) >= amount for key, amount in bundle.items())


def node_plan(accelerator_type: str, num_accelerators: int, nodes: Optional[int], cpu: bool) -> NodePlan:
    """The nodes of a workload on a cluster: upstream's count for GPUs (the count over GPUs per node), ``--nodes``
    (a divisor of the count, default 1) for CPU ranks."""
    if cpu:
        count = 1 if nodes is None else nodes
        if count <= 0 or num_accelerators % count:
            raise InvalidArguments(
                f"--nodes {count}: the node count must divide compute.num_accelerators "
                f"({num_accelerators}), so that every node runs as many CPU ranks; try "
                f"{', '.join(str(d) for d in _divisors(num_accelerators))}"
            )
        return NodePlan(count, num_accelerators // count, cpu=True)
    per_node = AcceleratorType(accelerator_type).gpus_per_node or 1
    count = num_accelerators // per_node
    if nodes is not None and nodes != count:
        raise InvalidArguments(
            f"--nodes {nodes}: {num_accelerators} x {accelerator_type} is {count} node(s) of "
            f"{per_node} GPU(s), as on Databricks; --nodes chooses the node count of CPU workloads "
            "only (leave it out)"
        )
    return NodePlan(count, per_node, cpu=False)


def _divisors(number: int) -> List[int]:
    return [d for d in range(1, number + 1) if number % d == 0]
