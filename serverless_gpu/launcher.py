"""Deprecated: use ``databricks.air.launcher``. The same objects, under the old import path (the one Databricks'
fine-tuning examples use: ``from serverless_gpu.launcher import distributed``)."""

from databricks.air.launcher import *  # noqa: F403
from databricks.air.launcher import DistributedFunction, __all__  # noqa: F401
