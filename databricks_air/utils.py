"""Process-group helpers for a training function: set up ``torch.distributed`` and exchange small Python objects.

:func:`initialize_dist` creates the default process group from the torchrun environment variables that
``.distributed(...)`` sets for every rank; run outside a rank (no variables set), it creates a one-rank group that
needs no rendezvous, so the same training code also runs in a plain notebook cell. The reference only supports
GPUs (NCCL); CPU ranks using gloo are our addition.

:func:`barrier` and :func:`all_gather_object` work with or without a process group when there is a single rank,
and refuse to run without one when there are several.

torch is imported when a function is called, not when this module is imported.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

from databricks.air.runtime import _env_int, _initialized_dist, get_world_size

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["initialize_dist", "barrier", "all_gather_object"]

_ACCEPTED_DEVICES = '"cuda", "cuda:<index>", "gpu" (NCCL) or "cpu" (gloo)'

# The torchrun variables and their single-process values.
_SINGLE_RANK_DEFAULTS = (
    ("NODE_RANK", 0),
    ("WORLD_SIZE", 1),
    ("LOCAL_WORLD_SIZE", 1),
    ("RANK", 0),
    ("LOCAL_RANK", 0),
)


def _resolve_device(device: Union[None, str, "torch.device"]) -> Tuple[str, Optional[int]]:
    """``("cuda", index or None)`` or ``("cpu", None)`` for ``device``; ``ValueError`` for anything else."""
    import torch

    if device is None:
        return ("cuda", None) if torch.cuda.is_available() else ("cpu", None)
    if isinstance(device, torch.device):
        if device.type in ("cuda", "cpu"):
            return device.type, (device.index if device.type == "cuda" else None)
        raise ValueError(f"Unsupported device {str(device)!r} for initialize_dist(); use {_ACCEPTED_DEVICES}.")
    if isinstance(device, str):
        name = device.strip().lower()
        if name in ("cuda", "gpu"):
            return "cuda", None
        if name == "cpu":
            return "cpu", None
        if name.startswith("cuda:"):
            index = name[len("cuda:") :]
            if index.isdigit():
                return "cuda", int(index)
    raise ValueError(f"Unsupported device {device!r} for initialize_dist(); use {_ACCEPTED_DEVICES}.")


def _single_rank_environment() -> bool:
    """True when every torchrun variable is unset or holds its single-process value."""
    return all(_env_int(name, default) == default for name, default in _SINGLE_RANK_DEFAULTS)


def _backend_name(dist: Any) -> str:
    return str(dist.get_backend()).lower()


def initialize_dist(device: Union[None, str, "torch.device"] = None, timeout: float = 1800.0) -> "torch.device":
    """Initialise ``torch.distributed``'s default process group from the torchrun environment variables.

    Args:
        device: where this rank computes. ``None``: ``"cuda"`` when CUDA is available, else ``"cpu"``. ``"cuda"``,
            ``"cuda:<index>"``, ``"gpu"`` or a CUDA ``torch.device`` use NCCL: the rank is bound to
            ``cuda:<LOCAL_RANK>`` (or the index given) with ``torch.cuda.set_device`` and TF32 matmuls and
            convolutions are enabled. ``"cpu"`` or a CPU ``torch.device`` use gloo (our addition; the reference
            supports GPUs only).
        timeout: seconds collective operations, and the rendezvous, may wait.

    When ``NODE_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` are all unset or equal
    their single-process values (0, 1, 1, 0, 0), they are set to those values in ``os.environ`` and a one-rank
    group is created on an in-memory ``HashStore`` (no ``MASTER_ADDR``/``MASTER_PORT`` needed). Otherwise the group
    is created with ``init_process_group(backend, timeout=...)`` from the environment (``env://``).

    Calling it again once the group exists with the same backend does nothing.

    Returns:
        The ``torch.device`` this rank uses (our addition; the reference returns ``None``): ``cuda:<index>`` or
        ``cpu``.

    Raises:
        ValueError: ``device`` is not one of the accepted devices, or ``timeout`` is not positive.
        RuntimeError: the default process group already exists with another backend, torch.distributed is not
            available, or a CUDA device was requested but CUDA is not available.
        RuntimeConfigurationError: one of the torchrun variables is not an integer.
    """
    import torch
    import torch.distributed as dist

    kind, index = _resolve_device(device)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    backend = "nccl" if kind == "cuda" else "gloo"
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this build of PyTorch.")

    if kind == "cuda":
        if index is None:
            index = _env_int("LOCAL_RANK", 0)
        resolved = torch.device("cuda", index)
    else:
        resolved = torch.device("cpu")

    if dist.is_initialized():
        current = _backend_name(dist)
        if backend not in current:
            raise RuntimeError(
                f"torch.distributed is already initialised with backend {current!r}; initialize_dist() for "
                f"device {str(resolved)!r} needs backend {backend!r}."
            )
        return resolved

    single_rank = _single_rank_environment()
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"initialize_dist() was asked for {str(resolved)!r} but CUDA is not available.")
        torch.cuda.set_device(resolved)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    wait = timedelta(seconds=float(timeout))
    if single_rank:
        for name, default in _SINGLE_RANK_DEFAULTS:
            os.environ[name] = str(default)
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=wait)
    else:
        dist.init_process_group(backend, timeout=wait)
    return resolved


def _require_group_or_single_rank(operation: str, group: Optional[Any]) -> None:
    """Raise ``RuntimeError`` when ``operation`` cannot run without a process group."""
    world_size = get_world_size()
    if world_size > 1 or group is not None:
        reason = f"the world size is {world_size}" if world_size > 1 else "a process group was given"
        raise RuntimeError(
            f"{operation}() needs torch.distributed to be initialised ({reason}); call "
            "databricks.air.utils.initialize_dist() or torch.distributed.init_process_group() first."
        )


def barrier(group: Optional[Any] = None) -> None:
    """Wait until every rank of ``group`` (default: all ranks) reaches this call.

    With a single rank and no process group, returns at once.

    Raises:
        RuntimeError: the world size is above 1 (or ``group`` is given) but torch.distributed is not initialised.
    """
    dist = _initialized_dist()
    if dist is None:
        _require_group_or_single_rank("barrier", group)
        return
    if "nccl" in _backend_name(dist):
        import torch

        # Without device_ids NCCL guesses the GPU from the rank and warns; use the one this rank is bound to.
        dist.barrier(group=group, device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier(group=group)


def all_gather_object(obj: Any, group: Optional[Any] = None) -> List[Any]:
    """Every rank's ``obj``, in a list indexed by rank within ``group`` (default: all ranks).

    ``obj`` must be picklable. With a single rank and no process group, returns ``[obj]``. With NCCL, the rank
    must be bound to its GPU first (as :func:`initialize_dist` does).

    Raises:
        RuntimeError: the world size is above 1 (or ``group`` is given) but torch.distributed is not initialised.
    """
    dist = _initialized_dist()
    if dist is None:
        _require_group_or_single_rank("all_gather_object", group)
        return [obj]
    gathered: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, obj, group=group)
    return gathered
