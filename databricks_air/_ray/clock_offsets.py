"""How far each rank's clock is from the caller's, for the straggler watch of a call on a Ray cluster.

The flight recorder stamps each collective with the rank's machine's clock; ranks on other machines are compared
on the caller's clock once each rank's offset is taken off its times. Measured once, at the straggler watch's first
look, as NTP does: a few round trips to the rank's host actor (on the rank's node), and of them the fastest, whose
midpoint is closest to the moment the host read its clock. The error is at most half that round trip; a clock that
drifts during a long call drifts into the figures (NTP-synchronised machines drift by microseconds a minute).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Tuple

ROUND_TRIPS = 5
_WAIT_SECONDS = 2.0


def measure(ray: Any, hosts: Dict[int, Any]) -> Tuple[Dict[int, float], str]:
    """``(rank -> its clock minus the caller's, in seconds; how that was measured, in words)`` for each rank's host
    (a Ray actor with a ``clock()`` method); a rank whose host does not answer gets no offset (0)."""
    offsets: Dict[int, float] = {}
    worst = 0.0
    for rank, host in hosts.items():
        best = None
        for _ in range(ROUND_TRIPS):
            sent = time.time()
            try:
                theirs = ray.get(host.clock.remote(), timeout=_WAIT_SECONDS)
            except Exception:  # noqa: BLE001 - a host that does not answer keeps the caller's clock
                break
            received = time.time()
            if best is None or received - sent < best[0]:
                best = (received - sent, theirs - (sent + received) / 2)
        if best is not None:
            offsets[rank] = best[1]
            worst = max(worst, best[0] / 2)
    note = (
        f"each rank's clock offset from the caller's, measured at the first look (the fastest of {ROUND_TRIPS} round "
        f"trips to its node), at most {worst * 1000:.1f} ms off"
    )
    return offsets, note
