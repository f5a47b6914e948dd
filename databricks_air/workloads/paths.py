"""Where the workload command keeps its files: one folder, ``~/.air``, moved with ``DATABRICKS_AIR_HOME``.

* ``runs/<id>/``: one folder per run (:mod:`.registry`);
* ``envs/<key>/``: the cached virtual environments of ``environment.dependencies`` (:mod:`.environments`);
* ``secrets/<scope>/<key>``: the local secret store (:mod:`.secret_store`).
"""

from __future__ import annotations

import os

from databricks.air import _variables

HOME_VARIABLE = _variables.HOME


def air_home() -> str:
    """``$DATABRICKS_AIR_HOME``, else ``~/.air`` (absolute)."""
    return os.path.abspath(os.path.expanduser(os.environ.get(HOME_VARIABLE) or "~/.air"))


def runs_dir() -> str:
    return os.path.join(air_home(), "runs")


def envs_dir() -> str:
    return os.path.join(air_home(), "envs")


def secrets_dir() -> str:
    return os.path.join(air_home(), "secrets")
