"""Deprecated: use ``databricks.air.utils``. The same objects, under the old import path."""

from databricks.air.utils import *  # noqa: F403
from databricks.air.utils import __all__  # noqa: F401
