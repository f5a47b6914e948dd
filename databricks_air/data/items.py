"""What one worker hands out during a pass: the local path of each of its positions, in order.

Without a cache a position's path is the listed file itself. With one, files are fetched through it (several at a
time when the folder is slow to read), and eviction is told which files are in flight. With ``on_error="skip"``,
a file that cannot be read gives its slot to another file of the same worker, so the rank keeps its count.
"""

from __future__ import annotations

from typing import Callable, Collection, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

from databricks.air.data.cache import FileCache
from databricks.air.data.cursor import Pass
from databricks.air.data.errors import DataFileError
from databricks.air.data.fetching import fetch_in_order
from databricks.air.data.listing import Listing

Pins = Callable[[], Optional[Collection[str]]]


def in_flight(listing: Listing, share: Sequence[int], current: Pass, window: int) -> Pins:
    """Which files eviction must keep now: those from the consumer's position on, ``window`` positions deep.

    Without a control block (a plain torch DataLoader's worker) nobody says what was consumed, so the whole rest
    of the pass is kept; once the main process has started another pass, this one's worker evicts nothing.
    """
    control, pass_id = current.control, current.pass_id

    def pins() -> Optional[Set[str]]:
        if control is None:
            return {listing.files[i] for i in share[current.start :]}
        if control.get("pass_id") != pass_id:
            return None
        first = max(control.get("released"), 0)
        return {listing.files[i] for i in share[first : first + window]}

    return pins


def pass_items(
    listing: Listing,
    share: Sequence[int],
    positions: Iterable[int],
    *,
    cache: Optional[FileCache],
    pins: Pins,
    threads: int,
    lookahead: int,
    skip_errors: bool,
    on_skip: Callable[[int, BaseException], None],
    on_next: Optional[Callable[[int], None]] = None,
) -> Iterator[str]:
    """Yield the local path for each of ``positions`` (indices into ``share``), in order.

    ``on_next(position)`` is called before each item is handed out (direct iteration: the previous one has been
    used); ``on_skip(listing index, error)`` for each file given up under ``skip_errors``.
    """
    if cache is None:
        return _in_place(positions, share, listing, on_next)

    def fetch(position: int) -> str:
        index = share[position]
        return cache.fetch(listing.path(index), listing.files[index], pins)

    if threads > 1:
        fetched = fetch_in_order(positions, fetch, threads, lookahead)
    else:
        hit = cache.hit_checker(listing.root, listing.files)
        if not skip_errors:
            return _through_local_cache(positions, share, hit, fetch, on_next)
        fetched = _answers_here(positions, share, hit, fetch)
    return _skipping(listing, share, fetched, on_skip, on_next, skip_errors)


def _in_place(
    positions: Iterable[int], share: Sequence[int], listing: Listing, on_next: Optional[Callable[[int], None]]
) -> Iterator[str]:
    for position in positions:
        if on_next is not None:
            on_next(position)
        yield listing.path(share[position])


def _through_local_cache(
    positions: Iterable[int],
    share: Sequence[int],
    hit: Callable[[int], Optional[str]],
    fetch: Callable[[int], str],
    on_next: Optional[Callable[[int], None]],
) -> Iterator[str]:
    """The common case of a warm epoch, in one loop: a cache hit costs one ``stat`` call and little else."""
    for position in positions:
        if on_next is not None:
            on_next(position)
        path = hit(share[position])
        yield fetch(position) if path is None else path


def _answers_here(
    positions: Iterable[int],
    share: Sequence[int],
    hit: Callable[[int], Optional[str]],
    fetch: Callable[[int], str],
) -> Iterator[Tuple[int, Union[str, BaseException]]]:
    """``(position, path or error)``, fetched one at a time on this thread."""
    for position in positions:
        path = hit(share[position])
        if path is None:
            try:
                path = fetch(position)
            except Exception as error:  # noqa: BLE001 - handed to the caller, which decides to raise or skip
                yield position, error
                continue
        yield position, path


def _skipping(
    listing: Listing,
    share: Sequence[int],
    fetched: Iterable[Tuple[int, Union[str, BaseException]]],
    on_skip: Callable[[int, BaseException], None],
    on_next: Optional[Callable[[int], None]],
    skip_errors: bool,
) -> Iterator[str]:
    """Hand out fetched paths in order; under ``skip_errors``, a file that failed gives its slot to the last file
    read before it (to the next one read when none was)."""
    substitute: Optional[str] = None
    waiting: List[int] = []
    for position, result in fetched:
        if on_next is not None:
            on_next(position)
        if isinstance(result, BaseException):
            if not skip_errors or not isinstance(result, DataFileError):
                raise result
            on_skip(share[position], result)
            if substitute is None:
                waiting.append(position)  # filled by the next file that can be read
                continue
            result = substitute
        substitute = result
        for _ in waiting:
            yield result
        waiting.clear()
        yield result
    if waiting:
        first = listing.path(share[waiting[0]])
        raise DataFileError(
            f"none of this worker's {len(waiting)} remaining files could be read (first: {first}); "
            "on_error='skip' has no file left to fill their slots",
            path=first,
        )
