"""Deprecated: use ``databricks.air.ray``. The same objects, under the old import path."""

from databricks.air.ray import *  # noqa: F403
from databricks.air.ray import __all__  # noqa: F401
