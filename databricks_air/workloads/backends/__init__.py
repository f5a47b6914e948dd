"""Where workload runs go, by name: ``local`` (this machine) for now; each run's spec records its backend.

A backend is a :class:`~.base.Backend`; register a new one in :data:`BACKENDS` (module and class, imported when
used, so that a backend's own dependencies, Ray's say, load only for its runs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Dict, Tuple

from databricks.air.workloads.errors import InvalidArguments

if TYPE_CHECKING:  # the keeper, started as a module of this package, imports nothing it does not use
    from databricks.air.workloads.backends.base import Backend

BACKENDS: Dict[str, Tuple[str, str]] = {
    "local": ("databricks.air.workloads.backends.local", "LocalBackend"),
}
DEFAULT = "local"


def get(name: str) -> "Backend":
    """The backend called ``name``."""
    if name not in BACKENDS:
        raise InvalidArguments(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    module, attribute = BACKENDS[name]
    return getattr(importlib.import_module(module), attribute)()
