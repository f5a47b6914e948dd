"""Deprecated: the old name of ``databricks.air``.

Every name here is the very object ``databricks.air`` exports (so ``isinstance`` and ``except`` work across both);
the old ``gpus``/``gpu_type`` arguments keep working with a ``FutureWarning``. Move code over with::

    air-migrate path/to/notebooks
"""

from __future__ import annotations

import os
import warnings

from databricks.air import __version__, distributed, ray_init, ray_launch
from databricks.air._variables import SERVERLESS_GPU_WARNED

__all__ = ["distributed", "ray_launch", "ray_init", "__version__"]

# Warned once per process tree: ranks inherit the variable, so they do not repeat the warning.
if not os.environ.get(SERVERLESS_GPU_WARNED):
    os.environ[SERVERLESS_GPU_WARNED] = "1"
    warnings.warn(
        "serverless_gpu is deprecated: import from databricks.air instead (for example "
        "`from databricks.air import distributed`); the air-migrate command rewrites notebooks and scripts for you.",
        FutureWarning,
        stacklevel=2,  # the importing line (the import machinery's own frames are skipped)
    )
