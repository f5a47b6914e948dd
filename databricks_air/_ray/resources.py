"""What one unit of work reserves on a Ray cluster, and what the cluster has: shared by a remote call's ranks
(:mod:`.request`) and a workload's nodes (the workload command's Ray backend).

A unit reserves its CPUs or GPUs, and for GPUs of one model Ray's accelerator-type resource
(``accelerator_type:H100``), which Ray gives every node from the name of its GPUs: a tiny amount of it
(:data:`ACCELERATOR_AMOUNT`) selects nodes of that model without limiting how many units share one.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from databricks.air.compute import GPUType

# Ray names a node's accelerator type from its GPU's name ("NVIDIA A10G" -> "A10G"); AWS sells A10 as A10G.
RAY_ACCELERATOR_NAMES = {GPUType.H100: ("H100",), GPUType.A10: ("A10", "A10G"), GPUType.B300: ("B300",)}
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
# The amount Ray's own `accelerator_type=` option reserves: enough to select the node, never a limit.
ACCELERATOR_AMOUNT = 0.001

Node = Mapping[str, Any]
"""A node as :func:`ray.nodes` describes it (``Alive``, ``Resources``, ``NodeManagerAddress``)."""


def cluster_resources(ray: Any) -> Tuple[List[Dict[str, Any]], Optional[Mapping[str, float]]]:
    """The cluster's nodes (:func:`ray.nodes`) and what an autoscaling cluster may grow to (:func:`max_resources`):
    what a request for units is checked against."""
    return ray.nodes(), max_resources()


def max_resources() -> Optional[Mapping[str, float]]:
    """What an autoscaling cluster may grow to, as Ray's own libraries read it; ``None`` where unknown."""
    try:
        from ray._private.state import state

        return state.get_max_resources_from_cluster_config()
    except Exception:  # noqa: BLE001 - a private API of Ray: without it, the live nodes are the limit
        return None


def alive(nodes: Sequence[Node]) -> List[Node]:
    """The nodes that are up."""
    return [node for node in nodes if node.get("Alive")]


def ray_names(model: Optional[GPUType]) -> Tuple[str, ...]:
    """The names Ray may give nodes whose GPUs are ``model``."""
    return RAY_ACCELERATOR_NAMES.get(model, ()) if model is not None else ()


def accelerator_resource(
    model: Optional[GPUType],
    alive_nodes: Sequence[Node],
    max_resources: Mapping[str, float],
    weight: Callable[[Node], int],
) -> Optional[str]:
    """Ray's accelerator-type resource for GPUs of ``model`` on this cluster, or ``None`` where it has none.

    Of the names Ray may give the model, the one whose nodes weigh most (``weight``: a node's GPUs, or 1 per node);
    with none up now, one an autoscaling cluster may add (``max_resources``).
    """
    names = ray_names(model)
    weights = {
        name: sum(
            weight(node) for node in alive_nodes if node.get("Resources", {}).get(ACCELERATOR_RESOURCE_PREFIX + name)
        )
        for name in names
    }
    present = [name for name in names if weights[name]]
    if present:
        return ACCELERATOR_RESOURCE_PREFIX + max(present, key=lambda name: weights[name])
    for name in names:  # none up now, but an autoscaling cluster may add such nodes
        if max_resources.get(ACCELERATOR_RESOURCE_PREFIX + name):
            return ACCELERATOR_RESOURCE_PREFIX + name
    return None


def describe_nodes(nodes: Sequence[Node]) -> str:
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
