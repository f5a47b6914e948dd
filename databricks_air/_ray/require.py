"""Ray is an optional dependency: import it, or say which extra brings it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# What the package's `ray` extra brings (pyproject.toml); the package itself is installed from a checkout or a wheel.
RAY_REQUIREMENT = "ray[default]>=2.40"


def import_ray() -> ModuleType:
    """The ``ray`` module; an :class:`ImportError` saying how to install it when it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError as error:
        raise ImportError(
            f"Ray is not installed, and remote=True, ray_init and ray_launch need it: "
            f'pip install "{RAY_REQUIREMENT}" (what the package\'s ray extra brings: pip install ".[ray]" in '
            "its checkout)"
        ) from error


def require_ray() -> None:
    """Raise the same :class:`ImportError` when Ray is not installed, without importing it (which takes a while)."""
    if importlib.util.find_spec("ray") is None:
        import_ray()
