"""Placement groups: reserving units of work on the Ray cluster, starting one actor in each, and giving them back.

Ray's own gang scheduling: a group is created whole or not at all, its bundles placed by a strategy. A remote call
packs its ranks onto as few nodes as possible (``PACK``, :func:`reserve`), so that ranks of one node share fast
links; a workload spreads its nodes over distinct Ray nodes (``STRICT_SPREAD``). While the cluster is busy a call
waits, within its timeout, and says once what it is waiting for.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, Iterator, List, Optional

from databricks.air._ray.require import import_ray
from databricks.air.exceptions import LocalExecutionTimeoutError
from databricks.air._notices import notice

PACK, SPREAD, STRICT_PACK, STRICT_SPREAD = "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"
"""Ray's placement strategies."""
_WAIT_STEP_SECONDS = 1  # Ray waits in whole seconds
NOTE_AFTER_SECONDS = 10.0


def create(bundle: Dict[str, float], count: int, strategy: str, name: str = "") -> Any:
    """A placement group of ``count`` copies of ``bundle``, placed by ``strategy``; not waited for."""
    import_ray()
    from ray.util.placement_group import placement_group

    return placement_group([dict(bundle) for _ in range(count)], strategy=strategy, name=name)


def reserve(
    name: str, bundle: Dict[str, float], count: int, what: str, deadline: Optional[float], timeout_note: str
) -> Any:
    """A ready placement group of ``count`` copies of ``bundle``, packed (``what`` in words, for messages); removed
    again if waiting fails or is interrupted."""
    group = create(bundle, count, PACK)
    started = time.monotonic()
    noted = False
    try:
        while not group.wait(_wait_step(deadline)):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise LocalExecutionTimeoutError(
                    f"{name}: the Ray cluster did not free {what} for the ranks within the timeout, so nothing was "
                    f"started. {timeout_note}"
                )
            if not noted and now - started >= NOTE_AFTER_SECONDS:
                noted = True
                notice(f"waiting for the Ray cluster to free {what} for {name} (other work holds them)")
    except BaseException:
        release(group)
        raise
    return group


def start_actors(
    ray: Any, actor_class: type, group: Any, bundle: Dict[str, float], count: int, **options: Any
) -> Iterator[Any]:
    """One actor of ``actor_class`` in each of the ``count`` bundles of ``group``, in bundle order, each holding its
    bundle's resources (``bundle``); ``options`` are Ray's other actor options. Started one at a time: a caller
    keeps those started before one that fails, to kill them."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    remote_class = ray.remote(actor_class)
    held = dict(
        num_cpus=bundle.get("CPU", 0),
        num_gpus=bundle.get("GPU", 0),
        resources={key: value for key, value in bundle.items() if key not in ("CPU", "GPU")},
    )
    for index in range(count):
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
        yield remote_class.options(scheduling_strategy=strategy, **held, **options).remote()


def dismantle(ray: Any, actors: List[Any], group: Any) -> None:
    """Kill ``actors`` and give ``group`` back: nothing of them is left on the cluster, whatever state they are in."""
    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - an actor that is gone already
            pass
    if group is not None:
        release(group)


def release(group: Any) -> None:
    """Give the reservation back (also stops whatever still runs in it)."""
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(group)
    except Exception:  # noqa: BLE001 - the cluster may be gone; nothing is left to give back then
        pass


def _wait_step(deadline: Optional[float]) -> int:
    if deadline is None:
        return _WAIT_STEP_SECONDS
    return max(0, min(_WAIT_STEP_SECONDS, math.ceil(deadline - time.monotonic())))
