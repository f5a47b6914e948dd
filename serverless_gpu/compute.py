"""Deprecated: use ``databricks.air.compute``. The same objects, under the old import path."""

from databricks.air.compute import *  # noqa: F403
from databricks.air.compute import __all__  # noqa: F401
