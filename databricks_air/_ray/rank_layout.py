"""From where Ray placed each rank to the torchrun environment of every rank.

Ray decides the node of every bundle (PACK: as few nodes as possible). Ranks are then numbered node by node, as
torchrun numbers them: nodes in the order of their first bundle (so bundle 0's node is ``NODE_RANK`` 0 and hosts
rank 0), ranks of one node consecutive. ``MASTER_ADDR`` is rank 0's node. On GPU nodes every rank of a node sees
the node's reserved GPUs in local-rank order, so ``torch.cuda.set_device(LOCAL_RANK)`` selects its own GPU as it
does under torchrun (Ray alone would show each rank only its own GPU, as device 0).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

from databricks.air._engine.rank_environ import coordinates


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one bundle's rank host landed."""

    node_id: str
    node_ip: str
    gpu_ids: Tuple[str, ...] = ()
    """The GPUs Ray reserved for this bundle (empty for CPU ranks)."""


@dataclasses.dataclass(frozen=True)
class Place:
    """One rank: its bundle, and its coordinates in the job."""

    bundle: int
    rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    slot: Slot


def arrange(slots: Sequence[Slot]) -> List[Place]:
    """Every bundle's rank, in global rank order."""
    nodes: Dict[str, List[int]] = {}
    for bundle, slot in enumerate(slots):
        nodes.setdefault(slot.node_id, []).append(bundle)  # dicts keep first-seen order
    places: List[Place] = []
    for node_rank, bundles in enumerate(nodes.values()):
        for local_rank, bundle in enumerate(bundles):
            places.append(Place(bundle, len(places), local_rank, node_rank, len(bundles), slots[bundle]))
    return places


def rank_environ(places: Sequence[Place], rank: int, master_port: int) -> Dict[str, str]:
    """The variables that make rank ``rank`` a torchrun-style rank of this job (as the local engine sets them)."""
    place = places[rank]
    nodes = places[-1].node_rank + 1
    environ = coordinates(rank, place.local_rank, len(places), place.local_world_size, place.node_rank, nodes)
    environ.update(MASTER_ADDR=places[0].slot.node_ip, MASTER_PORT=str(master_port))
    node_gpus = [gpu for other in places if other.node_rank == place.node_rank for gpu in other.slot.gpu_ids]
    if node_gpus:
        environ["CUDA_VISIBLE_DEVICES"] = ",".join(node_gpus)
    return environ
