"""What a remote call asks of a Ray cluster: one placement-group bundle per rank, and whether the cluster can ever
give it. (How many ranks, and of which accelerator, was settled at decoration: ``validation.resolve_remote``.)

A rank reserves one GPU (``{"GPU": 1}``), or one CPU in CPU mode (``{"CPU": 1}``). An accelerator type adds Ray's
accelerator-type resource (``accelerator_type:H100``), which Ray gives every node from the name of its GPUs, so
the ranks land on nodes of that model. A request the cluster cannot satisfy even when idle fails at once, naming
what the cluster has, rather than waiting forever for resources that will never come.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence

from databricks.air.compute import AcceleratorType, GPUType
from databricks.air.exceptions import GPUValidationError

# Ray names a node's accelerator type from its GPU's name ("NVIDIA A10G" -> "A10G"); AWS sells A10 as A10G.
RAY_ACCELERATOR_NAMES = {GPUType.H100: ("H100",), GPUType.A10: ("A10", "A10G"), GPUType.B300: ("B300",)}
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
# The amount Ray's own `accelerator_type=` option reserves: enough to select the node, never a limit.
_ACCELERATOR_AMOUNT = 0.001


@dataclasses.dataclass(frozen=True)
class RankRequest:
    """The ranks of one remote call: how many, and of which accelerator."""

    count: int
    shape: AcceleratorType

    @property
    def cpu(self) -> bool:
        return self.shape is AcceleratorType.CPU

    @property
    def unit(self) -> str:
        return "CPU" if self.cpu else "GPU"

    def bundle(
        self, nodes: Sequence[Mapping[str, Any]], max_resources: Optional[Mapping[str, float]] = None
    ) -> Dict[str, float]:
        """The bundle of one rank on this cluster; :class:`GPUValidationError` if the cluster can never run them all.

        ``nodes`` is :func:`ray.nodes`; ``max_resources`` what an autoscaling cluster may grow to, where known.
        """
        alive = [node for node in nodes if node.get("Alive")]
        bundle: Dict[str, float] = {self.unit: 1.0}
        holders = alive
        if not self.cpu:
            accelerator = self._accelerator_resource(alive, max_resources or {})
            bundle[accelerator] = _ACCELERATOR_AMOUNT
            holders = [node for node in alive if node.get("Resources", {}).get(accelerator)]
        capacity = sum(int(node.get("Resources", {}).get(self.unit, 0)) for node in holders)
        if max_resources:
            capacity = max(capacity, int(max_resources.get(self.unit) or 0))
        if capacity < self.count:
            raise GPUValidationError(self._too_many(capacity, alive))
        return bundle

    def _too_many(self, capacity: int, alive: Sequence[Mapping[str, Any]]) -> str:
        what = self.unit if self.cpu else f"{self.shape.gpu_type.name} GPU"  # type: ignore[union-attr]
        cluster = f"Cluster: {describe_nodes(alive)}."
        if not capacity:
            return f"num_accelerators={self.count} asks for {what} ranks, but the Ray cluster has no {what}. {cluster}"
        return (
            f"num_accelerators={self.count} asks for {self.count} {what} rank(s), one {self.unit} each, but the Ray "
            f"cluster has {capacity} {what}(s) in all. {cluster} Pass num_accelerators={capacity} or fewer, or add "
            "nodes to the cluster."
        )

    def _accelerator_resource(self, alive: Sequence[Mapping[str, Any]], max_resources: Mapping[str, float]) -> str:
        model = self.shape.gpu_type
        names = RAY_ACCELERATOR_NAMES.get(model, ()) if model is not None else ()
        gpus_by_name = {
            name: sum(
                int(node.get("Resources", {}).get("GPU", 0))
                for node in alive
                if node.get("Resources", {}).get(ACCELERATOR_RESOURCE_PREFIX + name)
            )
            for name in names
        }
        present = [name for name in names if gpus_by_name[name]]
        if present:
            return ACCELERATOR_RESOURCE_PREFIX + max(present, key=lambda name: gpus_by_name[name])
        for name in names:  # none up now, but an autoscaling cluster may add such nodes
            if max_resources.get(ACCELERATOR_RESOURCE_PREFIX + name):
                return ACCELERATOR_RESOURCE_PREFIX + name
        raise GPUValidationError(
            f"accelerator_type={self.shape.value} needs nodes whose GPUs Ray names {' or '.join(names)} (resource "
            f"{ACCELERATOR_RESOURCE_PREFIX}{names[0]}), and the Ray cluster has none. "
            f"Cluster: {describe_nodes(alive)}."
        )

def describe_nodes(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``2 node(s): 10.0.0.1 (CPU 8, GPU 1, accelerator_type:A10G), ...`` for messages."""
    if not nodes:
        return "no live nodes"
    parts: List[str] = []
    for node in nodes:
        resources = node.get("Resources", {})
        shown = [f"{key} {_amount(resources[key])}" for key in ("CPU", "GPU") if resources.get(key)]
        shown += sorted(key for key in resources if key.startswith(ACCELERATOR_RESOURCE_PREFIX))
        parts.append(f"{node.get('NodeManagerAddress', '?')} ({', '.join(shown) or 'nothing'})")
    return f"{len(nodes)} node(s): " + ", ".join(parts)


def _amount(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
