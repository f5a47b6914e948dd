"""Where workload runs go, by name: ``local`` (this machine, the default) or ``ray`` (a Ray cluster); each run's
spec records its backend.

A backend is a :class:`~.base.Backend`; register a new one in :data:`BACKENDS` (module and class, imported when
used, so that a backend's own dependencies, Ray's say, load only for its runs). Options of ``air run`` that only
one backend takes (``--address``, ``--nodes``) reach its constructor; readers of a run construct it without them.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any, Dict, Tuple

from databricks.air.workloads.errors import InvalidArguments

if TYPE_CHECKING:  # the keeper, started as a module of this package, imports nothing it does not use
    from databricks.air.workloads.backends.base import Backend

BACKENDS: Dict[str, Tuple[str, str]] = {
    "local": ("databricks.air.workloads.backends.local", "LocalBackend"),
    "ray": ("databricks.air.workloads.backends.ray_backend", "RayBackend"),
}
DEFAULT = "local"


def get(name: str, **options: Any) -> "Backend":
    """The backend called ``name``, with the options given for it (those left at ``None`` or ``False`` count as not
    given: :class:`InvalidArguments` when the backend takes no such option)."""
    if name not in BACKENDS:
        raise InvalidArguments(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    given = {key: value for key, value in options.items() if value is not None and value is not False}
    module, attribute = BACKENDS[name]
    backend_class = getattr(importlib.import_module(module), attribute)
    accepted = set(inspect.signature(backend_class).parameters)
    unknown = sorted(set(given) - accepted)
    if unknown:
        flags = ", ".join("--" + key.replace("_", "-") for key in unknown)
        takers = [other for other in BACKENDS if other != name]
        raise InvalidArguments(
            f"{flags}: not an option of the {name} backend (the {' or '.join(takers)} backend's: --backend {takers[0]})"
            if takers
            else f"{flags}: not an option here"
        )
    return backend_class(**given)
