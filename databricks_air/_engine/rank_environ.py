"""The torchrun variables of a rank, for ranks on this machine and on a Ray cluster alike.

torchrun gives every worker its coordinates (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``...) and a few
variables of the job as a whole; code written for torchrun reads them, so every rank gets the same set here. Who
sets ``MASTER_ADDR`` and ``MASTER_PORT`` depends on where the ranks run, so the caller of these functions adds them.
"""

from __future__ import annotations

import secrets
from typing import Dict, Mapping, Optional

from databricks.air._call_folder import CallFolder


def job_environ(job_id: Optional[str] = None, restart_count: int = 0, max_restarts: int = 0) -> Dict[str, str]:
    """The variables every rank of one call shares beyond its coordinates: the call's run id (a new one when
    ``job_id`` is not given), and which restart this is, as torchrun sets them."""
    return {
        "ROLE_NAME": "default",
        "REPLICA_RANK": "0",
        "PYTHONUNBUFFERED": "1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_RUN_ID": job_id or f"databricks-air-{secrets.token_hex(6)}",
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
    }


def flight_recorder_environ(environ: Mapping[str, str], log_dir: Optional[str]) -> Dict[str, str]:
    """torch's flight recorder on for every process group, dumping into the call's log folder on a watchdog timeout,
    where the caller (``environ``) has not chosen otherwise under either of torch's names for a setting.

    Every group then records its last collectives (the snapshot reads where each rank is from them), and when
    NCCL's own watchdog fires before our timeout, its dump lands in ``<log_dir>/flight_recorder_rank_<r>``
    (``log_dir=None``, for ranks on other machines: torch's default place on their node).
    """
    settings = {}
    if not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & environ.keys():
        settings["TORCH_FR_BUFFER_SIZE"] = "2000"
    if not {"TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_ON_TIMEOUT"} & environ.keys():
        settings["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    if log_dir is not None and not {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} & environ.keys():
        settings["TORCH_FR_DUMP_TEMP_FILE"] = CallFolder(log_dir).flight_recorder_prefix
    return settings


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
