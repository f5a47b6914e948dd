"""``databricks.air``: run a PyTorch training function once per GPU (or CPU rank) of this machine.

Example::

    from databricks.air import distributed

    @distributed()
    def train():
        ...

    results = train.distributed()   # one value per rank, in rank order
"""

from __future__ import annotations

from typing import Any

from databricks.air.version import __version__

__all__ = ["distributed", "__version__"]


def distributed(*args: Any, **kwargs: Any) -> Any:
    """Decorator factory; see :func:`databricks.air.launcher.distributed`. Imported lazily to keep imports light."""
    from databricks.air.launcher import distributed as _distributed

    return _distributed(*args, **kwargs)
