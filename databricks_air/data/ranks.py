"""Which rank this process is, and a check that all ranks agree on what they are about to iterate."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from torch.utils.data import get_worker_info

from databricks.air.data.errors import RankMismatchError


def process_group() -> Optional[Any]:
    """``torch.distributed`` when its default process group is initialised in this process, else ``None``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def resolve_rank(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int, bool]:
    """``(rank, world_size, from_process_group)``: explicit values, else the process group's, else ``(0, 1)``.

    Without a process group but with ``WORLD_SIZE`` > 1 in the environment (a rank that has not called
    ``init_process_group`` yet), guessing ``(0, 1)`` would make every rank read every file: that is an error.
    """
    if rank is not None:
        return rank, world_size if world_size is not None else 1, False
    dist = process_group()
    if dist is not None:
        return dist.get_rank(), dist.get_world_size(), True
    declared = os.environ.get("WORLD_SIZE", "1").strip()
    if declared.isdigit() and int(declared) > 1:
        raise RuntimeError(
            f"UCVolumeDataset: WORLD_SIZE={declared} but torch.distributed has no process group in this process, "
            "so the dataset cannot tell which files are this rank's. Call dist.init_process_group(...) before "
            "iterating (or taking len()), or pass rank= and world_size= to UCVolumeDataset."
        )
    return 0, 1, False


class DatasetRank:
    """The rank a dataset reads for, and of how many: explicit, else the process group's, once it is known.

    The last one seen is remembered, for a spawned DataLoader worker (which has no process group) and for a
    process whose group was destroyed after training.
    """

    def __init__(self, rank: Optional[int], world_size: Optional[int]) -> None:
        self._explicit = (rank, world_size) if rank is not None and world_size is not None else None
        self._known = self._explicit or _grouped()

    def for_pass(self) -> Tuple[int, int, bool]:
        """``(rank, world_size, from_process_group)`` for a pass about to begin: :func:`resolve_rank`'s answer."""
        rank, world, from_group = resolve_rank(*(self._explicit or (None, None)))
        self._known = (rank, world)
        return rank, world, from_group

    def now(self) -> Tuple[int, int]:
        """``(rank, world_size)`` as best known now, for ``len()``, a saved state, or a worker's pass."""
        if self._explicit is not None:
            return self._explicit
        if get_worker_info() is not None and self._known is not None:
            return self._known  # set by the main process; a spawned worker has no process group
        grouped = _grouped()
        if grouped is not None:
            self._known = grouped
            return grouped
        if self._known is not None:
            return self._known  # the process group is gone (destroyed after training): the last one seen
        rank, world, _ = resolve_rank(None, None)
        return rank, world


def _grouped() -> Optional[Tuple[int, int]]:
    dist = process_group()
    return (dist.get_rank(), dist.get_world_size()) if dist is not None else None


def check_agreement(facts: Dict[str, Any], root: str) -> None:
    """All-gather ``facts`` from every rank; raise :class:`RankMismatchError` on any difference, on every rank."""
    dist = process_group()
    if dist is None or dist.get_world_size() == 1:
        return
    gathered: List[Optional[Dict[str, Any]]] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, facts)
    differing = [key for key in facts if len({repr(g.get(key) if g else None) for g in gathered}) > 1]
    if not differing:
        return
    lines = []
    for key in differing:
        values = ", ".join(f"rank {r}: {g.get(key) if g else None!r}" for r, g in enumerate(gathered))
        lines.append(f"  {key}: {values}")
    hint = ""
    if "listing" in differing:
        hint = (
            " The ranks list different files under the folder: files written just before on another machine may "
            "not be visible on every node yet (wait, then build the dataset again on every rank), or the ranks "
            "were given different paths or include/exclude patterns."
        )
    elif "position" in differing:
        hint = (
            " The ranks start from different positions: load each rank's own state saved at the same step, or "
            "call set_epoch(...) with the same epoch on every rank."
        )
    raise RankMismatchError(
        f"UCVolumeDataset under {root}: the ranks disagree before the first batch, so they would read different "
        "numbers of batches or the same files twice (and DDP would hang):\n" + "\n".join(lines) + "\n" + hint.strip()
    )
