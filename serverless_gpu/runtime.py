"""Deprecated: use ``databricks.air.runtime``. The same objects, under the old import path."""

from databricks.air.runtime import *  # noqa: F403
from databricks.air.runtime import __all__  # noqa: F401
