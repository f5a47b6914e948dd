"""The torchrun variables of a rank, for ranks on this machine and on a Ray cluster alike.

torchrun gives every worker its coordinates (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``...) and a few
variables of the job as a whole; code written for torchrun reads them, so every rank gets the same set here. Who
sets ``MASTER_ADDR`` and ``MASTER_PORT`` depends on where the ranks run, so the caller of these functions adds them.
"""

from __future__ import annotations

import secrets
from typing import Dict


def job_environ() -> Dict[str, str]:
    """The variables every rank of one call shares beyond its coordinates (a new run id per call)."""
    return {
        "ROLE_NAME": "default",
        "REPLICA_RANK": "0",
        "PYTHONUNBUFFERED": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_RUN_ID": f"databricks-air-{secrets.token_hex(6)}",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
    }


def coordinates(
    rank: int, local_rank: int, world_size: int, local_world_size: int, node_rank: int, nodes: int
) -> Dict[str, str]:
    """Where one rank stands in the job, as torchrun names it (one role, so role ranks are global ranks)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "ROLE_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "ROLE_WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "NODE_RANK": str(node_rank),
        "GROUP_RANK": str(node_rank),
        "GROUP_WORLD_SIZE": str(nodes),
    }
