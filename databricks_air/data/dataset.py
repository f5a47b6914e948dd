"""``UCVolumeDataset``: the files of a folder, yielded as local paths, split exactly across ranks and workers.

Example::

    from databricks.air.data import DataLoader, UCVolumeDataset

    dataset = UCVolumeDataset("/Volumes/main/default/images", recursive=True, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, num_workers=4)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for paths in loader:          # a list of 32 local file paths
            ...

See ``docs/data.md`` for the guarantees and for resuming mid-epoch.

The dataset composes its parts: the :class:`~databricks.air.data.listing.Listing` (made once), its
:class:`~databricks.air.data.ranks.DatasetRank`, the :class:`~databricks.air.data.cursor.EpochCursor` (the
position, which a :class:`~databricks.air.data.DataLoader` is handed and moves), the
:class:`~databricks.air.data.storage.LocalStorage` (workspace, control block, file cache), and a
:class:`~databricks.air.data.plan.Layout` per pass (share length and batch rule), from which
:mod:`~databricks.air.data.items` yields each worker's paths.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from torch.utils.data import IterableDataset, get_worker_info

from databricks.air.data import plan
from databricks.air.data.cursor import EpochCursor, Pass
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.items import in_flight, pass_items
from databricks.air.data.listing import Listing, compile_patterns, list_folder
from databricks.air.data.ranks import DatasetRank, check_agreement
from databricks.air.data.retry import RetryPolicy
from databricks.air.data.state import build_state, check_state
from databricks.air.data.storage import LocalStorage

__all__ = ["UCVolumeDataset"]

_log = logging.getLogger("databricks.air.data")

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Batching:
    """How a dataset's passes are cut into batches and prefetched: the DataLoader's settings, or, for a plain
    torch DataLoader or direct iteration, the dataset's own ``batch_size`` (1 when unset) and no workers."""

    batch_size: int
    drop_last: bool
    num_workers: int
    prefetch_factor: int


class UCVolumeDataset(IterableDataset):
    """The files under a folder, yielded as local file paths (``str``), each exactly once per epoch.

    Args:
        path: a folder: a Unity Catalog volume (``/Volumes/<catalog>/<schema>/<volume>/...``) or any local or
            mounted folder.
        recursive: also list sub-folders (default: only the folder's own files, like the reference).
        include: glob pattern(s) matched against the path relative to ``path``; only matching files are kept.
        exclude: glob pattern(s); matching files are left out.
        hidden: also list names starting with ``.`` or ``_`` and ending with ``.tmp`` or ``~`` (default: skip
            them, and sub-folders named that way).
        allow_empty: accept a folder with no files (default: raise, rather than yield empty epochs).
        shuffle: a new order every epoch, the same on every rank and in every run for the same ``seed`` and epoch.
        seed: the shuffle's seed.
        equalize: how ranks get equal shares: ``"pad"`` (default) repeats the first files of the epoch until
            every rank has ``ceil(N / world_size)``; ``"drop"`` leaves out the last ``N % world_size``;
            ``"none"`` gives each file to exactly one rank (shares may then differ by one, which hangs DDP).
        batch_size: the batch size of a plain ``torch.utils.data.DataLoader`` around this dataset; not needed
            with :class:`databricks.air.data.DataLoader`, which sets it.
        rank: this process's rank (default: from ``torch.distributed``).
        world_size: the number of ranks (default: from ``torch.distributed``).
        cache: copy files to local disk before yielding them: ``"auto"`` (default) when the folder is not on a
            local disk (a FUSE or network mount, ``/Volumes``), ``True`` always, ``False`` never.
        cache_dir: where the local copies go (default ``DATABRICKS_AIR_DATA_CACHE_DIR``, else the temp folder).
        cache_limit_bytes: most bytes the copies may take (per rank); files in flight are never evicted.
        min_free_bytes: evict copies rather than leave less free on the cache's disk (default
            ``SGC_FSLAYER_MIN_FREE_DISK_BYTES``, else 10 % of that disk).
        io_threads: files each worker copies at the same time (hides the latency of a network volume).
        retries: attempts for a transient read error (a missing file or a permission error is never retried).
        retry_seconds: the most time spent retrying a transient read error.
        on_error: ``"raise"`` (default), or ``"skip"``: a file that cannot be read after its retries is logged,
            recorded in the state, and its slot is filled with another file, so every rank keeps its count.
        verify_ranks: at the start of each pass, check that all ranks list the same files and plan the same
            batches (one small all-gather); a mismatch raises before any batch.
        filesystem: how the folder is read; a :class:`VolumeFileSystem` subclass can add latency or count calls.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        recursive: bool = False,
        include: Optional[Union[str, Sequence[str]]] = None,
        exclude: Optional[Union[str, Sequence[str]]] = None,
        hidden: bool = False,
        allow_empty: bool = False,
        shuffle: bool = False,
        seed: int = 0,
        equalize: str = "pad",
        batch_size: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        cache: Union[bool, str] = "auto",
        cache_dir: Optional[PathLike] = None,
        cache_limit_bytes: Optional[int] = None,
        min_free_bytes: Optional[int] = None,
        io_threads: int = 8,
        retries: int = 5,
        retry_seconds: float = 10.0,
        on_error: str = "raise",
        verify_ranks: bool = True,
        filesystem: Optional[VolumeFileSystem] = None,
    ) -> None:
        super().__init__()
        _check_arguments(
            path,
            equalize=equalize,
            cache=cache,
            on_error=on_error,
            seed=seed,
            io_threads=io_threads,
            batch_size=batch_size,
            cache_limit_bytes=cache_limit_bytes,
            min_free_bytes=min_free_bytes,
            rank=rank,
            world_size=world_size,
        )
        self.path = os.path.abspath(os.fspath(path))
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.equalize = equalize
        self.batch_size = batch_size
        self.on_error = on_error
        self.io_threads = io_threads
        self.verify_ranks = verify_ranks
        self.cache_limit_bytes = cache_limit_bytes
        self.min_free_bytes = min_free_bytes
        filesystem = filesystem if filesystem is not None else VolumeFileSystem()
        retry = RetryPolicy(attempts=retries, total_seconds=retry_seconds)
        cache_root = os.fspath(cache_dir) if cache_dir is not None else None
        self.listing = list_folder(
            self.path,
            recursive=recursive,
            include=compile_patterns(include, "include"),
            exclude=compile_patterns(exclude, "exclude"),
            hidden=hidden,
            allow_empty=allow_empty,
            skip_dirs=[cache_root] if cache_root else [],
            filesystem=filesystem,
            retry=retry,
        )
        self._local = filesystem.is_local(self.path)  # asked once: it reads the mount table
        self.cache_enabled = cache is True or (cache == "auto" and not self._local)
        if self.cache_enabled and cache_limit_bytes is not None:
            _check_limit_fits(self.listing, filesystem, cache_limit_bytes, io_threads)

        self._rank = DatasetRank(rank, world_size)
        self._batching = Batching(batch_size=batch_size or 1, drop_last=False, num_workers=0, prefetch_factor=0)
        self._managed = False  # a DataLoader of ours begins the passes (see _attach_loader)
        self._cursor = EpochCursor()
        self._storage = LocalStorage(
            cache_root, limit_bytes=cache_limit_bytes, min_free_bytes=min_free_bytes, filesystem=filesystem, retry=retry
        )
        self._skip_log: List[str] = []  # skipped in this process since the DataLoader last collected them
        self._last_share: Optional[Tuple[Any, Tuple[int, ...]]] = None

    # -- public API -------------------------------------------------------------------------------------------

    @property
    def files(self) -> List[str]:
        """Absolute paths of every listed file, in listing order."""
        return [self.listing.path(i) for i in range(self.listing.count)]

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (advanced after a full pass; see :meth:`set_epoch`)."""
        return self._cursor.position(self._layout())[0]

    def __len__(self) -> int:
        """Files this rank yields per epoch: equal on every rank unless ``equalize="none"``."""
        return self._layout().share

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next, from its start; a no-op if the dataset is already in that epoch.

        The epoch advances by itself after each full pass, so calling ``set_epoch(epoch)`` at the top of every
        epoch (as with ``DistributedSampler``) and not calling it at all give the same order; after loading a
        mid-epoch state, ``set_epoch`` with the saved epoch keeps the saved position.
        """
        _check_int("epoch", epoch, minimum=0)
        if epoch != self.epoch:
            self._cursor.jump(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """The position to resume from: small, JSON-ready, versioned (see :mod:`databricks.air.data.state`)."""
        layout = self._layout()
        epoch, delivered = self._cursor.position(layout)
        return build_state(
            rank=layout.rank,
            world_size=layout.world_size,
            epoch=epoch,
            delivered=delivered,
            shuffle=self.shuffle,
            seed=self.seed,
            equalize=self.equalize,
            listing=self.listing.describe(),
            skipped=list(self._cursor.skipped),
        )

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`: the next pass starts with the first file not yet delivered.

        Raises :class:`~databricks.air.data.errors.StateMismatchError` (a ``ValueError``) when the state was saved
        for other files, another world size, another rank or another order. An iteration already running when
        the state is loaded stops with an error at its next item; the next ``iter()`` resumes.
        """
        layout = self._layout()
        expected = {
            "rank": layout.rank,
            "world_size": layout.world_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "equalize": self.equalize,
            "listing": self.listing.describe(),
        }
        self._cursor.jump(*check_state(state_dict, expected, layout.share, self.path))

    def dropped_files(self, epoch: Optional[int] = None) -> List[str]:
        """With ``equalize="drop"``: the files that no rank yields in ``epoch`` (default: the current one)."""
        layout = self._layout()
        epoch = self._cursor.position(layout)[0] if epoch is None else epoch
        order = self._order(epoch)
        return [self.listing.path(i) for i in plan.dropped_positions(order, layout.world_size, self.equalize)]

    def close(self) -> None:
        """Remove this process's local copies now, rather than when the process exits."""
        self._storage.close()

    def __repr__(self) -> str:
        return (
            f"UCVolumeDataset({self.path!r}, files={self.listing.count}, shuffle={self.shuffle}, "
            f"equalize={self.equalize!r}, cache={'on' if self.cache_enabled else 'off'})"
        )

    # -- iteration --------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        info = get_worker_info()
        if info is not None:
            # A DataLoader worker: its part of the pass the main process began, or, under a plain torch
            # DataLoader, of this copy's own position.
            layout = self._layout()
            current = self._cursor.published(layout) if self._managed else self._cursor.unpublished(layout)
            return self._paths(current, info.id, info.num_workers, self._skip_log.append)
        served = self._cursor.take_served()
        if served is not None:  # a DataLoader without workers began it, and counts what it delivers
            return self._paths(served, 0, 1, self._skip_log.append)
        return self._iterate_directly()

    def _iterate_directly(self) -> Iterator[str]:
        """Plain ``for path in dataset``: the position advances as items are handed out."""
        cursor = self._cursor
        current = self._begin_pass(workers=0)
        paths = self._paths(current, 0, 1, cursor.skip, on_next=partial(cursor.release, current))
        # Once per item, so the cursor's fields are read and set here: holds() and advance() cost 5 % of a warm item.
        for delivered, path in enumerate(paths, current.start + 1):
            if cursor.generation != current.generation:
                raise RuntimeError(
                    "the dataset's position changed (load_state_dict or set_epoch) during this iteration; start a "
                    "new one with iter(dataset)"
                )
            cursor.delivered = delivered
            yield path
        cursor.end(current)

    def _paths(
        self,
        current: Pass,
        worker_id: int,
        num_workers: int,
        record_skip: Callable[[str], None],
        on_next: Optional[Callable[[int], None]] = None,
    ) -> Iterator[str]:
        """The local paths worker ``worker_id`` of ``num_workers`` yields in pass ``current``."""
        layout = current.layout
        share = self._rank_share(current.epoch, layout)
        lookahead = 2 * self.io_threads
        return pass_items(
            self.listing,
            share,
            layout.positions(current.start, num_workers, worker_id),
            cache=self._storage.cache() if self.cache_enabled else None,
            pins=in_flight(self.listing, share, current, self._pin_window(layout, num_workers, lookahead)),
            threads=1 if self._local else self.io_threads,
            lookahead=lookahead,
            skip_errors=self.on_error == "skip",
            on_skip=partial(_report_skip, self.listing, record_skip),
            on_next=on_next,
        )

    # -- what the DataLoader drives from the main process -----------------------------------------------------

    def _attach_loader(self, batching: Batching) -> EpochCursor:
        """A DataLoader of ours takes over the batching and the passes; it is handed the cursor to move."""
        if self.batch_size is not None and self.batch_size != batching.batch_size:
            raise ValueError(
                f"UCVolumeDataset(batch_size={self.batch_size}) but the DataLoader's batch_size is "
                f"{batching.batch_size}: leave the dataset's batch_size unset (the DataLoader sets it)"
            )
        self._batching = batching
        self._managed = True
        return self._cursor

    def _begin_pass(self, workers: int) -> Pass:
        """Resolve ranks, check that they agree, and publish this pass to the workers. Main process only."""
        rank, world, from_group = self._rank.for_pass()
        layout = self._layout((rank, world))
        if from_group and world > 1 and self.verify_ranks:
            check_agreement(
                {
                    "listing": self.listing.describe(),
                    "batch_size": layout.batch_size,
                    "drop_last": layout.drop_last,
                    "equalize": self.equalize,
                    "shuffle": self.shuffle,
                    "seed": self.seed,
                    "position": self._cursor.position(layout),
                },
                self.path,
            )
        control = self._storage.control(shared=self.cache_enabled or workers > 0)
        current = self._cursor.begin(layout, control)
        self._warn_about_empty_streams(current, workers)
        return current

    def _warn_about_empty_streams(self, current: Pass, workers: int) -> None:
        layout = current.layout
        batches = layout.batches(current.start)
        if workers > 1 and batches < workers and current.start == 0:
            idle = ", ".join(str(w) for w in range(batches, workers))
            _log.warning(
                "UCVolumeDataset: rank %d has %d file(s) this epoch, %d batch(es) of %d, for %d workers: worker(s) "
                "%s get no files. Fewer workers would do the same work.",
                layout.rank,
                layout.share,
                batches,
                layout.batch_size,
                workers,
                idle,
            )
        if self.equalize == "drop" and layout.rank == 0:
            dropped = self.dropped_files(current.epoch)
            if dropped:
                _log.warning(
                    "UCVolumeDataset: equalize='drop' leaves out %d file(s) this epoch: %s",
                    len(dropped),
                    ", ".join(dropped[:10]) + (" ..." if len(dropped) > 10 else ""),
                )

    # -- helpers ----------------------------------------------------------------------------------------------

    def _layout(self, rank_and_world: Optional[Tuple[int, int]] = None) -> plan.Layout:
        """This rank's layout, for the rank and world size given (default: as known now)."""
        rank, world = rank_and_world or self._rank.now()
        batching = self._batching
        return plan.Layout.of(self.listing.count, rank, world, self.equalize, batching.batch_size, batching.drop_last)

    def _order(self, epoch: int) -> List[int]:
        return plan.epoch_order(self.listing.count, self.listing.fingerprint, self.seed, epoch, self.shuffle)

    def _rank_share(self, epoch: int, layout: plan.Layout) -> Sequence[int]:
        """This rank's files in ``epoch``, kept for the next pass when it will be the same (no shuffle, or a
        pass resumed in the same epoch)."""
        key = (epoch if self.shuffle else None, layout.world_size, layout.rank)
        if self._last_share is None or self._last_share[0] != key:
            share = plan.rank_share(self._order(epoch), layout.world_size, layout.rank, self.equalize)
            self._last_share = (key, tuple(share))
        return self._last_share[1]

    def _pin_window(self, layout: plan.Layout, num_workers: int, lookahead: int) -> int:
        """Positions after ``released`` that may be in flight: the consumer's batch, the prefetched ones, and
        each worker's thread look-ahead."""
        batching = self._batching
        prefetch = batching.prefetch_factor if batching.num_workers > 0 else 0
        workers = max(num_workers, 1)
        batch_size = layout.batch_size
        return batch_size * (1 + workers * (prefetch + 1)) + workers * (lookahead + batch_size)

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_skip_log"] = []
        state["_last_share"] = None  # each process plans its own; no need to ship a list of every file
        return state


def _report_skip(listing: Listing, record: Callable[[str], None], index: int, error: BaseException) -> None:
    _log.warning("skipping %s (on_error='skip'): %s", listing.path(index), error)
    record(listing.files[index])


def _check_arguments(
    path: Any,
    *,
    equalize: str,
    cache: Any,
    on_error: str,
    seed: Any,
    io_threads: Any,
    batch_size: Optional[int],
    cache_limit_bytes: Optional[int],
    min_free_bytes: Optional[int],
    rank: Optional[int],
    world_size: Optional[int],
) -> None:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise TypeError(f"UCVolumeDataset needs a folder path (str or os.PathLike), not {path!r}")
    if equalize not in plan.EQUALIZE_MODES:
        raise ValueError(f"equalize must be one of {plan.EQUALIZE_MODES}, not {equalize!r}")
    if cache not in (True, False, "auto"):
        raise ValueError(f"cache must be 'auto', True or False, not {cache!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    _check_int("seed", seed, minimum=None)
    _check_int("io_threads", io_threads, minimum=1)
    if batch_size is not None:
        _check_int("batch_size", batch_size, minimum=1)
    if cache_limit_bytes is not None:
        _check_int("cache_limit_bytes", cache_limit_bytes, minimum=1)
    if min_free_bytes is not None:
        _check_int("min_free_bytes", min_free_bytes, minimum=0)
    if (rank is None) != (world_size is None):
        raise ValueError("pass both rank= and world_size=, or neither (then torch.distributed decides)")
    if rank is not None and world_size is not None:
        _check_int("world_size", world_size, minimum=1)
        _check_int("rank", rank, minimum=0)
        if rank >= world_size:
            raise ValueError(f"rank={rank} must be smaller than world_size={world_size}")


def _check_int(name: str, value: Any, minimum: Optional[int]) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an int{bound}, not {value!r}")


def _check_limit_fits(listing: Listing, filesystem: VolumeFileSystem, limit: int, threads: int) -> None:
    def size(index: int) -> int:
        return filesystem.stat(listing.path(index)).st_size

    with ThreadPoolExecutor(max_workers=threads) as pool:
        sizes = list(pool.map(size, range(listing.count)))
    largest = max(sizes, default=0)
    if largest > limit:
        index = sizes.index(largest)
        raise ValueError(
            f"cache_limit_bytes={limit} is smaller than {listing.path(index)} ({largest} bytes), so that file "
            "could never be cached. Raise the limit above the largest file, or pass cache=False."
        )
