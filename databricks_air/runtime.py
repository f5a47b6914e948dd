"""Where this rank stands: its ranks, world sizes and node address, as a running training function sees them.

Each helper reads the torchrun environment variable that ``.distributed(...)`` sets for every rank (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``REPLICA_RANK``) and falls back to the
single-process default when it is unset, so the same code runs in a rank and in a plain notebook cell.

When ``torch.distributed`` has an initialised default process group, :func:`get_world_size` and
:func:`get_global_rank` return the process group's values and check them against the environment: a value that
disagrees raises :class:`~databricks.air.exceptions.RuntimeConfigurationError`, and a missing variable raises
:class:`~databricks.air.exceptions.MissingEnvironmentError`.

Importing this module does not import torch: a process group can only exist once torch has been imported, so the
helpers look at ``torch.distributed`` only when torch is already loaded.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from typing import Any, Optional

from databricks.air.exceptions import MissingEnvironmentError, RuntimeConfigurationError

__all__ = [
    "get_local_rank",
    "get_local_world_size",
    "get_node_rank",
    "get_world_size",
    "get_global_rank",
    "get_replica_rank",
    "get_node_ip",
    "get_restart_count",
]

_SIOCGIFADDR = 0x8915  # Linux ioctl: an interface's IPv4 address
_DEFAULT_INTERFACE = "eth0"
_ROUTES = "/proc/net/route"
_LOOPBACK = "127.0.0.1"


def _env_int(name: str, default: int) -> int:
    """The integer value of environment variable ``name``, or ``default`` when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return _parse_int(name, raw)


def _parse_int(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise RuntimeConfigurationError(
            f"Environment variable {name}={raw!r} is not an integer; unset it or set it to an integer."
        ) from None


def _initialized_dist() -> Optional[Any]:
    """``torch.distributed`` when its default process group is initialised, else ``None``.

    torch is never imported here: without it loaded, no process group can exist in this process.
    """
    if sys.modules.get("torch") is None:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _checked(name: str, default: int, dist_value: Optional[int]) -> int:
    """``dist_value`` checked against environment variable ``name``, or the variable (or ``default``) if no group."""
    if dist_value is None:
        return _env_int(name, default)
    raw = os.environ.get(name)
    if raw is None:
        raise MissingEnvironmentError(
            f"torch.distributed is initialised (value {dist_value}) but environment variable {name} is not set."
        )
    env_value = _parse_int(name, raw)
    if env_value != dist_value:
        raise RuntimeConfigurationError(
            f"torch.distributed reports {name.lower()} {dist_value} but environment variable {name}={env_value}; "
            "they must agree."
        )
    return dist_value


def get_local_rank() -> int:
    """This rank's index on its node (``LOCAL_RANK``; 0 when unset).

    Raises:
        RuntimeConfigurationError: ``LOCAL_RANK`` is not an integer.
    """
    return _env_int("LOCAL_RANK", 0)


def get_local_world_size() -> int:
    """The number of ranks on this node (``LOCAL_WORLD_SIZE``; 1 when unset).

    Raises:
        RuntimeConfigurationError: ``LOCAL_WORLD_SIZE`` is not an integer.
    """
    return _env_int("LOCAL_WORLD_SIZE", 1)


def get_node_rank() -> int:
    """This node's index among the nodes of the call (``NODE_RANK``; 0 when unset).

    Raises:
        RuntimeConfigurationError: ``NODE_RANK`` is not an integer.
    """
    return _env_int("NODE_RANK", 0)


def get_restart_count() -> int:
    """How many times this call's ranks were started again after a failure (``TORCHELASTIC_RESTART_COUNT``, as
    torchrun sets it; 0 in the first attempt and when unset). Ours, not the reference's: code that must also run on
    Databricks reads ``int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))`` instead.

    Raises:
        RuntimeConfigurationError: ``TORCHELASTIC_RESTART_COUNT`` is not an integer.
    """
    return _env_int("TORCHELASTIC_RESTART_COUNT", 0)


def get_replica_rank() -> int:
    """This replica's index (``REPLICA_RANK``; 0 when unset).

    Raises:
        RuntimeConfigurationError: ``REPLICA_RANK`` is not an integer.
    """
    return _env_int("REPLICA_RANK", 0)


def get_world_size() -> int:
    """The total number of ranks.

    With an initialised ``torch.distributed`` default process group, ``dist.get_world_size()``, which must equal
    ``WORLD_SIZE``; otherwise ``WORLD_SIZE`` (1 when unset).

    Raises:
        RuntimeConfigurationError: ``WORLD_SIZE`` is not an integer, or differs from the process group's size.
        MissingEnvironmentError: the process group is initialised but ``WORLD_SIZE`` is unset.
    """
    dist = _initialized_dist()
    return _checked("WORLD_SIZE", 1, None if dist is None else int(dist.get_world_size()))


def get_global_rank(group: Optional[Any] = None) -> int:
    """This rank's index among all ranks, or within ``group``.

    Without ``group``: with an initialised ``torch.distributed`` default process group, ``dist.get_rank()``, which
    must equal ``RANK``; otherwise ``RANK`` (0 when unset).

    Args:
        group: a ``torch.distributed`` process group; when given, the result is ``dist.get_rank(group)`` (the rank
            within that group, -1 if this process is not a member) and the environment is not consulted.

    Raises:
        RuntimeConfigurationError: ``RANK`` is not an integer, or differs from the process group's rank.
        MissingEnvironmentError: the process group is initialised but ``RANK`` is unset.
    """
    if group is not None:
        import torch.distributed as dist

        return int(dist.get_rank(group))
    initialized = _initialized_dist()
    return _checked("RANK", 0, None if initialized is None else int(initialized.get_rank()))


def get_node_ip() -> str:
    """This machine's IPv4 address, as a dotted-quad string.

    The address of interface ``eth0`` when it has one; otherwise that of the interface carrying the default route;
    otherwise ``"127.0.0.1"``.
    """
    return _interface_address(_DEFAULT_INTERFACE) or _default_route_address() or _LOOPBACK


def _interface_address(interface: str) -> Optional[str]:
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = struct.pack("256s", interface.encode()[:15])
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
    except OSError:  # no such interface, no IPv4 address on it, or not Linux
        return None
    return socket.inet_ntoa(answer[20:24])


def _default_route_address() -> Optional[str]:
    """The IPv4 address of the interface that carries the default route (read from the kernel's route table)."""
    try:
        with open(_ROUTES) as routes:
            next(routes, None)  # header
            for line in routes:
                fields = line.split()
                if len(fields) > 1 and fields[1] == "00000000":  # destination 0.0.0.0: the default route
                    return _interface_address(fields[0])
    except OSError:  # not Linux
        return None
    return None
