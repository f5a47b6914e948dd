"""Fetching files in order with several I/O threads, so that one worker hides the latency of a slow volume.

A network mount answers each file after milliseconds of latency, during which a process would sit idle; with
``threads`` requests in flight, one worker process reads ``threads`` files at a time while still handing them out
in order.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Deque, Iterable, Iterator, Tuple, TypeVar, Union

T = TypeVar("T")
R = TypeVar("R")


def fetch_in_order(
    items: Iterable[T], fetch: Callable[[T], R], threads: int, lookahead: int
) -> Iterator[Tuple[T, Union[R, BaseException]]]:
    """Yield ``(item, fetch(item))`` in the order of ``items``, or ``(item, error)`` when ``fetch`` raised.

    Up to ``lookahead`` items are being fetched ahead of the one handed out, by ``threads`` threads (with one
    thread, the caller's own loop does better). Closing the generator early cancels what has not started and
    waits for what has.
    """
    source = iter(items)
    pending: Deque[Tuple[T, Future]] = deque()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="air-data-fetch")
    try:
        for item in source:
            pending.append((item, pool.submit(fetch, item)))
            if len(pending) >= lookahead:
                break
        while pending:
            item, future = pending.popleft()
            for following in source:  # the next item, if there is one
                pending.append((following, pool.submit(fetch, following)))
                break
            error = future.exception()
            yield (item, error) if error is not None else (item, future.result())
    finally:
        for _, future in pending:
            future.cancel()
        pool.shutdown(wait=True)
