"""``databricks.air``: run a PyTorch training function once per GPU (or CPU rank) of this machine.

Example::

    from databricks.air import distributed

    @distributed()
    def train():
        ...

    results = train.distributed()   # one value per rank, in rank order
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from databricks.air._variables import BETA_NOTICE_SHOWN
from databricks.air.version import __version__

__all__ = ["distributed", "ray_launch", "ray_init", "__version__"]

logging.getLogger("databricks.sdk").setLevel(logging.WARNING)


def _runs_as_a_command_of_ours() -> bool:
    """``air`` (the console script) or ``python -m databricks.air...`` (its helpers: a run's supervisor, a node's
    keeper): a command whose output is its own, not a program of the user's using this Beta API."""
    argv = getattr(sys, "argv", None) or [""]  # an embedded interpreter may have no argv at all
    if os.path.basename(argv[0]) == "air":
        return True
    interpreter_argv = list(getattr(sys, "orig_argv", ()))  # python's own arguments too: -m and the module
    return any(
        flag == "-m" and name.startswith("databricks.air") for flag, name in zip(interpreter_argv, interpreter_argv[1:])
    )


def _warm_up_after_this_cell() -> None:
    """A notebook's first call needs MLflow, seconds to import (:mod:`databricks.air._tracking.warmup`): in a Jupyter or
    IPython kernel, its import begins in the background once the cell that imports this package has ended (the rest
    of the cell keeps the interpreter to itself, and the next cells come later); in a plain REPL, now. A script's
    begins at decoration. Nothing more is imported here: this runs within ``import databricks.air``."""
    from databricks.air import _notebook  # small: sys and typing only

    events = getattr(_notebook.ipython_shell(), "events", None)

    def start(*_: Any) -> None:
        if events is not None:
            try:
                events.unregister("post_run_cell", start)
            except ValueError:
                pass
        from databricks.air._tracking import warmup

        warmup.start()

    if events is not None:
        try:
            events.register("post_run_cell", start)
            return
        except Exception:  # noqa: BLE001 - an IPython without these events: begin now
            start()
    elif hasattr(sys, "ps1") or sys.flags.interactive:
        start()


# Shown once per process tree of the user's (ranks inherit the variable, so they do not repeat it), never by our
# own commands: `air list` is not a use of the API, and a workload's script that imports it says so in its log.
if not os.environ.get(BETA_NOTICE_SHOWN) and not _runs_as_a_command_of_ours():
    os.environ[BETA_NOTICE_SHOWN] = "1"
    logging.getLogger("databricks.air").warning("databricks.air is in Beta: its API may still change between releases.")
    if "IPython" in sys.modules or hasattr(sys, "ps1") or sys.flags.interactive:
        _warm_up_after_this_cell()


def distributed(*args: Any, **kwargs: Any) -> Any:
    """Decorator factory; see :func:`databricks.air.launcher.distributed`. Imported lazily to keep imports light."""
    from databricks.air._tracking import warmup

    warmup.start()  # MLflow's import, in the background, begins before the launcher's
    try:
        from databricks.air.launcher import distributed as _distributed
    except ModuleNotFoundError as error:
        raise ImportError(
            f"databricks.air.distributed needs {error.name!r}, which is not installed: install databricks-air-oss "
            "with its dependencies (pip install . in its checkout, or pip install the wheel built from it; not "
            "with --no-deps), in the environment of this interpreter"
        ) from error
    return _distributed(*args, **kwargs)


def ray_launch(*args: Any, **kwargs: Any) -> Any:
    """Decorator factory; see :func:`databricks.air.ray.ray_launch`. Ray is imported when it is used."""
    from databricks.air.ray import ray_launch as _ray_launch

    return _ray_launch(*args, **kwargs)


def ray_init(*args: Any, **kwargs: Any) -> Any:
    """``ray.init`` with local-first defaults; see :func:`databricks.air.ray.ray_init`."""
    from databricks.air.ray import ray_init as _ray_init

    return _ray_init(*args, **kwargs)
