"""Polling the actors that host a call's ranks or a workload's nodes, and finding those that were lost.

Each host is asked for its news (output, an exit) with one poll pending at a time; the host answers when it has
some or after the poll's seconds. A host whose actor died (its node was lost, or Ray killed it) answers its poll
with Ray's error: the unit it hosted is gone with it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Set, Tuple, Union


class HostPolls:
    """The pending polls of some hosts, each host named by its index (a rank, a node)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        """How long a host waits for news before it answers a poll."""
        self.pending: Dict[Any, int] = {}
        """Pending poll -> host index."""

    def polled(self) -> Set[int]:
        """The hosts with a poll pending."""
        return set(self.pending.values())

    def ask(self, index: int, host: Any) -> None:
        """Poll ``host`` (whose ``poll`` method takes the seconds to wait)."""
        self.pending[host.poll.remote(self.seconds)] = index

    def answers(self, ray: Any, timeout: float) -> Iterator[Tuple[int, Union[Dict[str, Any], BaseException]]]:
        """``(index, report)`` for each poll answered within ``timeout``; for a host that was lost, Ray's error
        instead of the report. A poll is taken off before its answer is read: one not handled (an interrupt) is
        asked again."""
        for ref in answered(ray, list(self.pending), timeout):
            index = self.pending.pop(ref)
            try:
                report = ray.get(ref)
            except ray.exceptions.RayError as error:
                yield index, error
                continue
            yield index, report


def answered(ray: Any, refs: List[Any], timeout: float) -> List[Any]:
    """The refs whose answer is in: waits up to ``timeout`` for the first, then takes every other one already in."""
    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
    if ready:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    return ready


def first_line(error: BaseException) -> str:
    """What a Ray error says, in one line (its class name when it says nothing), for a lost host's message."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
