"""Deprecated: an old path of the top-level names, seen in public code (``from serverless_gpu.api import
distributed``). The same objects as ``databricks.air``'s; ``air-migrate`` rewrites it to ``databricks.air``."""

from databricks.air import distributed, ray_init, ray_launch

__all__ = ["distributed", "ray_launch", "ray_init"]
