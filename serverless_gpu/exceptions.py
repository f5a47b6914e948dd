"""Deprecated: use ``databricks.air.exceptions``. The same objects, under the old import path."""

from databricks.air.exceptions import *  # noqa: F403
from databricks.air.exceptions import __all__  # noqa: F401
