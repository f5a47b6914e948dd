"""What a remote call asks of a Ray cluster: one placement-group bundle per rank, and whether the cluster can ever
give it. (How many ranks, and of which accelerator, was settled at decoration: ``validation.resolve_remote``.)

A rank reserves one GPU (``{"GPU": 1}``), or one CPU in CPU mode (``{"CPU": 1}``). An accelerator type adds Ray's
accelerator-type resource (``accelerator_type:H100``, :mod:`.resources`), so the ranks land on nodes of that
model. A request the cluster cannot satisfy even when idle fails at once, naming what the cluster has, rather than
waiting forever for resources that will never come.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Sequence

from databricks.air._ray import resources
from databricks.air._ray.resources import ACCELERATOR_RESOURCE_PREFIX, describe_nodes
from databricks.air.compute import AcceleratorType
from databricks.air.exceptions import GPUValidationError


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
        alive = resources.alive(nodes)
        bundle: Dict[str, float] = {self.unit: 1.0}
        holders = alive
        if not self.cpu:
            accelerator = self._accelerator(alive, max_resources or {})
            bundle[accelerator] = resources.ACCELERATOR_AMOUNT
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

    def _accelerator(self, alive: Sequence[Mapping[str, Any]], max_resources: Mapping[str, float]) -> str:
        """The accelerator-type resource of the ranks' GPUs: of the names Ray gives them, the one with most GPUs."""
        found = resources.accelerator_resource(
            self.shape.gpu_type, alive, max_resources, lambda node: int(node.get("Resources", {}).get("GPU", 0))
        )
        if found is None:
            names = resources.ray_names(self.shape.gpu_type)
            raise GPUValidationError(
                f"accelerator_type={self.shape.value} needs nodes whose GPUs Ray names {' or '.join(names)} (resource "
                f"{ACCELERATOR_RESOURCE_PREFIX}{names[0]}), and the Ray cluster has none. "
                f"Cluster: {describe_nodes(alive)}."
            )
        return found
