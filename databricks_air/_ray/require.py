"""Ray is an optional dependency: import it, or say which extra brings it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

RAY_EXTRA = "databricks-air-oss[ray]"


def import_ray() -> ModuleType:
    """The ``ray`` module; an :class:`ImportError` naming the extra when it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError as error:
        raise ImportError(
            f"Ray is not installed, and remote=True, ray_init and ray_launch need it: "
            f'pip install "{RAY_EXTRA}" (it brings ray[default])'
        ) from error


def require_ray() -> None:
    """Raise the same :class:`ImportError` when Ray is not installed, without importing it (which takes a while)."""
    if importlib.util.find_spec("ray") is None:
        import_ray()
