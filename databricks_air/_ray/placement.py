"""Reserving one call's ranks on the Ray cluster as a placement group, and giving them back.

Ray's own gang scheduling: the group is created whole or not at all, its bundles packed onto as few nodes as
possible (``PACK``), so that ranks of one node share fast links. While the cluster is busy the call waits, within its
timeout, and says once what it is waiting for.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Dict, Optional

from databricks.air._ray.require import import_ray
from databricks.air.exceptions import LocalExecutionTimeoutError

_WAIT_STEP_SECONDS = 1  # Ray waits in whole seconds
NOTE_AFTER_SECONDS = 10.0


def reserve(
    name: str, bundle: Dict[str, float], count: int, what: str, deadline: Optional[float], timeout_note: str
) -> Any:
    """A ready placement group of ``count`` copies of ``bundle`` (``what`` in words, for messages); removed again if
    waiting fails or is interrupted."""
    import_ray()
    from ray.util.placement_group import placement_group

    group = placement_group([dict(bundle) for _ in range(count)], strategy="PACK")
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
                print(
                    f"databricks.air: waiting for the Ray cluster to free {what} for {name} (other work holds them)",
                    file=sys.stderr,
                    flush=True,
                )
    except BaseException:
        release(group)
        raise
    return group


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
