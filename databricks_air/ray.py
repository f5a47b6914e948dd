"""Ray from a notebook: ``ray_init`` to connect (or start a local Ray), ``ray_launch`` to run a Ray job on the ranks
of a call.

For ``@distributed(..., remote=True)``, which runs a function's ranks on a Ray cluster, see
:func:`databricks.air.distributed`. Ray is an optional dependency, the ``ray`` extra: ``pip install ".[ray]"`` in a
checkout.

Example::

    from databricks.air.ray import ray_launch

    @ray_launch(num_accelerators=2, accelerator_type="CPU")
    def count_words(paths):
        import ray
        return sum(ray.get([count.remote(p) for p in paths]))   # a Ray job over both ranks' machines

    total = count_words.distributed(paths)[0]
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from databricks.air import _validation, launcher
from databricks.air._ray import rank_cluster, require, session
from databricks.air.exceptions import RuntimeConfigurationError

__all__ = ["ray_init", "ray_launch"]


def ray_init(*args: Any, **kwargs: Any) -> Any:
    """``ray.init(*args, **kwargs)``, returning Ray's context, with these defaults:

    * the working directory travels to every node as the job's ``runtime_env`` ``working_dir`` (modules next to the
      notebook import on every node); pass ``runtime_env={"working_dir": None}`` to ship nothing;
    * a dashboard it starts is on and listens on 127.0.0.1 only (pass ``dashboard_host=...`` to open it wider);
      its address is shown once, as a link in Jupyter;
    * an address that does not answer fails at once, with what to do.

    Remote calls (``remote=True``) then run in this cluster and this runtime environment.
    """
    return session.ray_init(*args, **kwargs)


def ray_launch(
    num_accelerators: Optional[int] = None,
    accelerator_type: Any = None,
    remote: bool = False,
    timeout: Optional[Union[int, float]] = _validation.DEFAULT_TIMEOUT,
    *,
    gpus: Optional[int] = None,
    gpu_type: Any = None,
) -> Callable[[Callable[..., Any]], launcher.DistributedFunction]:
    """Decorate a Ray job: ``fn.distributed(...)`` starts a Ray cluster over the call's ranks and runs ``fn`` once,
    on rank 0, as that cluster's driver.

    The parameters, their checks and their deprecated names are those of :func:`databricks.air.distributed`; the
    ranks run on this machine, or on a Ray cluster with ``remote=True``. The call returns one value per rank: ``fn``'s
    value at index 0, ``None`` elsewhere. The cluster it started is stopped when ``fn`` ends, however it ends.
    """
    require.require_ray()
    checked_timeout = _validation.check_timeout(timeout)
    count, requested = _validation.normalize_names(num_accelerators, accelerator_type, gpus, gpu_type, "@ray_launch")
    count = _validation.check_count(count)

    def decorate(func: Callable[..., Any]) -> launcher.DistributedFunction:
        if isinstance(func, launcher.DistributedFunction):
            raise RuntimeConfigurationError("this function is already decorated with @distributed() or @ray_launch()")
        function = launcher.build(rank_cluster.wrap(func), count, requested, remote, checked_timeout)
        _validation.decoration_notes(function.num_accelerators, checked_timeout)
        return function

    return decorate
