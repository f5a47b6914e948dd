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
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from torch.utils.data import IterableDataset, get_worker_info

from databricks.air.data import plan
from databricks.air.data.cache import FileCache
from databricks.air.data.control import Control
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.items import in_flight, pass_items
from databricks.air.data.listing import compile_patterns, list_folder
from databricks.air.data.ranks import check_agreement, resolve_rank
from databricks.air.data.retry import RetryPolicy
from databricks.air.data.state import build_state, check_state
from databricks.air.data.workspace import Workspace

__all__ = ["UCVolumeDataset"]

_log = logging.getLogger("databricks.air.data")

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class LoaderSettings:
    """What the DataLoader tells its dataset about batching (the dataset plans whole batches per worker)."""

    batch_size: int
    drop_last: bool
    num_workers: int
    prefetch_factor: int


@dataclass(frozen=True)
class _Pass:
    """One pass over (the rest of) an epoch, as the main process set it up."""

    pass_id: int
    epoch: int
    start: int
    share: int
    batch_size: int
    drop_last: bool


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
        if world_size is not None:
            _check_int("world_size", world_size, minimum=1)
            _check_int("rank", rank, minimum=0)
            if rank >= world_size:
                raise ValueError(f"rank={rank} must be smaller than world_size={world_size}")

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
        self._explicit_rank = (rank, world_size) if rank is not None else None
        self._filesystem = filesystem if filesystem is not None else VolumeFileSystem()
        self._retry = RetryPolicy(attempts=retries, total_seconds=retry_seconds)
        self._cache_dir = os.fspath(cache_dir) if cache_dir is not None else None
        self.listing = list_folder(
            self.path,
            recursive=recursive,
            include=compile_patterns(include, "include"),
            exclude=compile_patterns(exclude, "exclude"),
            hidden=hidden,
            allow_empty=allow_empty,
            skip_dirs=[self._cache_dir] if self._cache_dir else [],
            filesystem=self._filesystem,
            retry=self._retry,
        )
        self._local = self._filesystem.is_local(self.path)  # asked once: it reads the mount table
        self.cache_enabled = cache is True or (cache == "auto" and not self._local)
        if self.cache_enabled and cache_limit_bytes is not None:
            self._check_limit_fits(cache_limit_bytes)

        self._epoch = 0
        self._delivered = 0
        self._generation = 0
        self._skipped: List[str] = []
        self._skip_log: List[str] = []  # skipped in this process since the loader last collected them
        self._loader: Optional[LoaderSettings] = None
        self._managed_next = False
        self._rank_world = self._resolve_now_if_grouped()
        self._workspace: Optional[Workspace] = None
        self._control: Optional[Control] = None
        self._cache: Optional[FileCache] = None
        self._pass_counter = 0
        self._last_share: Optional[Tuple[Any, Tuple[int, ...]]] = None

    # -- public API -------------------------------------------------------------------------------------------

    @property
    def files(self) -> List[str]:
        """Absolute paths of every listed file, in listing order."""
        return [self.listing.path(i) for i in range(self.listing.count)]

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (advanced after a full pass; see :meth:`set_epoch`)."""
        return self._position()[0]

    def __len__(self) -> int:
        """Files this rank yields per epoch: equal on every rank unless ``equalize="none"``."""
        rank, world = self._rank_and_world()
        return plan.share_length(self.listing.count, world, rank, self.equalize)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next, from its start; a no-op if the dataset is already in that epoch.

        The epoch advances by itself after each full pass, so calling ``set_epoch(epoch)`` at the top of every
        epoch (as with ``DistributedSampler``) and not calling it at all give the same order; after loading a
        mid-epoch state, ``set_epoch`` with the saved epoch keeps the saved position.
        """
        _check_int("epoch", epoch, minimum=0)
        if epoch != self._position()[0]:
            self._epoch, self._delivered, self._skipped = epoch, 0, []
            self._generation += 1

    def state_dict(self) -> Dict[str, Any]:
        """The position to resume from: small, JSON-ready, versioned (see :mod:`databricks.air.data.state`)."""
        rank, world = self._rank_and_world()
        epoch, delivered = self._position()
        return build_state(
            rank=rank,
            world_size=world,
            epoch=epoch,
            delivered=delivered,
            shuffle=self.shuffle,
            seed=self.seed,
            equalize=self.equalize,
            listing=self.listing.describe(),
            skipped=list(self._skipped),
        )

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Resume from a :meth:`state_dict`: the next pass starts with the first file not yet delivered.

        Raises :class:`~databricks.air.data.errors.StateMismatchError` (a ``ValueError``) when the state was saved
        for other files, another world size, another rank or another order. An iteration already running when
        the state is loaded stops with an error at its next item; the next ``iter()`` resumes.
        """
        rank, world = self._rank_and_world()
        expected = {
            "rank": rank,
            "world_size": world,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "equalize": self.equalize,
            "listing": self.listing.describe(),
        }
        share = plan.share_length(self.listing.count, world, rank, self.equalize)
        self._epoch, self._delivered, self._skipped = check_state(state_dict, expected, share, self.path)
        self._generation += 1

    def dropped_files(self, epoch: Optional[int] = None) -> List[str]:
        """With ``equalize="drop"``: the files that no rank yields in ``epoch`` (default: the current one)."""
        epoch = self._position()[0] if epoch is None else epoch
        _, world = self._rank_and_world()
        order = self._order(epoch)
        return [self.listing.path(i) for i in plan.dropped_positions(order, world, self.equalize)]

    def close(self) -> None:
        """Remove this process's local copies now, rather than when the process exits."""
        if self._workspace is not None:
            self._workspace.close()
        self._workspace = self._control = self._cache = None

    def __repr__(self) -> str:
        return (
            f"UCVolumeDataset({self.path!r}, files={self.listing.count}, shuffle={self.shuffle}, "
            f"equalize={self.equalize!r}, cache={'on' if self.cache_enabled else 'off'})"
        )

    # -- iteration --------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        info = get_worker_info()
        if info is not None:
            return self._iterate_share(info.id, info.num_workers, managed=self._loader is not None)
        if self._managed_next:
            self._managed_next = False  # a DataLoader with num_workers=0 set this pass up
            return self._iterate_share(0, 1, managed=True)
        return self._iterate_directly()

    def _iterate_directly(self) -> Iterator[str]:
        """Plain ``for path in dataset``: positions advance as items are handed out."""
        current = self._begin_pass(workers=0)
        generation = self._generation
        control = self._control
        for position, path in self._yield_positions(current, 0, 1, control, consumer_releases=False):
            if self._generation != generation:
                raise RuntimeError(
                    "the dataset's position changed (load_state_dict or set_epoch) during this iteration; start a "
                    "new one with iter(dataset)"
                )
            self._delivered = position + 1
            yield path
        if self._generation == generation:
            self._end_pass(current)

    def _iterate_share(self, worker_id: int, num_workers: int, managed: bool) -> Iterator[str]:
        """One worker's part of the pass the main process set up (or of the current position, unmanaged)."""
        rank, world = self._rank_and_world()
        share = plan.share_length(self.listing.count, world, rank, self.equalize)
        settings = self._loader
        batch_size = settings.batch_size if settings else (self.batch_size or 1)
        drop_last = settings.drop_last if settings else False
        control = self._control if managed else None
        if control is not None:
            pass_id, epoch, start = control.get("pass_id"), control.get("epoch"), control.get("start")
        else:
            pass_id, (epoch, start) = -1, self._position()
        current = _Pass(pass_id, epoch, start, share, batch_size, drop_last)
        # map in C rather than a generator of our own: one frame less to resume for every file of every epoch
        return map(itemgetter(1), self._yield_positions(current, worker_id, num_workers, control, True))

    def _yield_positions(
        self, current: _Pass, worker_id: int, num_workers: int, control: Optional[Control], consumer_releases: bool
    ) -> Iterator[Tuple[int, str]]:
        rank, world = self._rank_and_world()
        share = self._rank_share(current.epoch, world, rank)
        positions = plan.worker_positions(
            current.share, current.start, current.batch_size, current.drop_last, num_workers, worker_id
        )
        lookahead = 2 * self.io_threads
        window = self._pin_window(num_workers, current.batch_size, lookahead)
        release = None
        if not consumer_releases and control is not None:
            release = lambda position: control.set(released=position)  # noqa: E731 - direct iteration
        return pass_items(
            self.listing,
            share,
            positions,
            cache=self._ensure_cache() if self.cache_enabled else None,
            pins=in_flight(self.listing, share, control, current.pass_id, current.start, window),
            threads=1 if self._local else self.io_threads,
            lookahead=lookahead,
            skip_errors=self.on_error == "skip",
            on_skip=self._record_skip,
            on_next=release,
        )

    def _record_skip(self, index: int, error: BaseException) -> None:
        name = self.listing.files[index]
        _log.warning("skipping %s (on_error='skip'): %s", self.listing.path(index), error)
        self._skip_log.append(name)
        if get_worker_info() is None and not self._loader:
            self._skipped.append(name)

    # -- set-up that the DataLoader drives from the main process ----------------------------------------------

    def _attach_loader(self, settings: LoaderSettings) -> None:
        if self.batch_size is not None and self.batch_size != settings.batch_size:
            raise ValueError(
                f"UCVolumeDataset(batch_size={self.batch_size}) but the DataLoader's batch_size is "
                f"{settings.batch_size}: leave the dataset's batch_size unset (the DataLoader sets it)"
            )
        self._loader = settings

    def _begin_pass(self, workers: int) -> _Pass:
        """Resolve ranks, check that they agree, and publish this pass to the workers. Main process only."""
        rank, world, from_group = resolve_rank(*(self._explicit_rank or (None, None)))
        self._rank_world = (rank, world)
        epoch, start = self._position()
        self._epoch, self._delivered = epoch, start
        settings = self._loader
        batch_size = settings.batch_size if settings else (self.batch_size or 1)
        drop_last = settings.drop_last if settings else False
        if from_group and world > 1 and self.verify_ranks:
            check_agreement(
                {
                    "listing": self.listing.describe(),
                    "batch_size": batch_size,
                    "drop_last": drop_last,
                    "equalize": self.equalize,
                    "shuffle": self.shuffle,
                    "seed": self.seed,
                    "position": (epoch, start),
                },
                self.path,
            )
        if self.cache_enabled or workers > 0:
            self._ensure_workspace()
        control = self._control_file() if self._workspace is not None else Control()
        self._control = control
        self._pass_counter += 1
        control.set(pass_id=self._pass_counter, epoch=epoch, start=start, released=start)
        self._warn_about_empty_streams(world, rank, workers, batch_size, drop_last, start)
        share = plan.share_length(self.listing.count, world, rank, self.equalize)
        return _Pass(self._pass_counter, epoch, start, share, batch_size, drop_last)

    def _end_pass(self, current: _Pass) -> None:
        self._epoch, self._delivered = current.epoch + 1, 0
        self._skipped = []

    def _position(self) -> tuple:
        """``(epoch, delivered)``, moved to the next epoch's start when nothing is left in this one."""
        settings = self._loader
        batch_size = settings.batch_size if settings else 1
        drop_last = settings.drop_last if settings else False
        if self._delivered > 0:
            rank, world = self._rank_and_world()
            share = plan.share_length(self.listing.count, world, rank, self.equalize)
            if plan.pass_complete(share, self._delivered, batch_size, drop_last):
                return self._epoch + 1, 0
        return self._epoch, self._delivered

    def _warn_about_empty_streams(
        self, world: int, rank: int, workers: int, batch_size: int, drop_last: bool, start: int
    ) -> None:
        share = plan.share_length(self.listing.count, world, rank, self.equalize)
        batches = plan.pass_batches(share, start, batch_size, drop_last)
        if workers > 1 and batches < workers and start == 0:
            idle = ", ".join(str(w) for w in range(batches, workers))
            _log.warning(
                "UCVolumeDataset: rank %d has %d file(s) this epoch, %d batch(es) of %d, for %d workers: worker(s) "
                "%s get no files. Fewer workers would do the same work.", rank, share, batches, batch_size,
                workers, idle,
            )
        if self.equalize == "drop" and rank == 0:
            dropped = self.dropped_files(self._epoch)
            if dropped:
                _log.warning("UCVolumeDataset: equalize='drop' leaves out %d file(s) this epoch: %s", len(dropped),
                             ", ".join(dropped[:10]) + (" ..." if len(dropped) > 10 else ""))

    # -- helpers ----------------------------------------------------------------------------------------------

    def _order(self, epoch: int) -> List[int]:
        return plan.epoch_order(self.listing.count, self.listing.fingerprint, self.seed, epoch, self.shuffle)

    def _rank_share(self, epoch: int, world: int, rank: int) -> Sequence[int]:
        """This rank's files in ``epoch``, kept for the next pass when it will be the same (no shuffle, or a
        pass resumed in the same epoch)."""
        key = (epoch if self.shuffle else None, world, rank)
        if self._last_share is None or self._last_share[0] != key:
            self._last_share = (key, tuple(plan.rank_share(self._order(epoch), world, rank, self.equalize)))
        return self._last_share[1]

    def _resolve_now_if_grouped(self) -> Optional[tuple]:
        if self._explicit_rank is not None:
            return self._explicit_rank
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return None

    def _rank_and_world(self) -> tuple:
        if self._explicit_rank is not None:
            return self._explicit_rank
        if get_worker_info() is not None and self._rank_world is not None:
            return self._rank_world  # set by the main process; a spawned worker has no process group
        grouped = self._resolve_now_if_grouped()
        if grouped is not None:
            self._rank_world = grouped
            return grouped
        if self._rank_world is not None:
            return self._rank_world  # the process group is gone (destroyed after training): the last one seen
        rank, world, _ = resolve_rank(None, None)
        return rank, world

    def _pin_window(self, num_workers: int, batch_size: int, lookahead: int) -> int:
        """Positions after ``released`` that may be in flight: the consumer's batch, the prefetched ones, and
        each worker's thread look-ahead."""
        settings = self._loader
        prefetch = settings.prefetch_factor if settings and settings.num_workers > 0 else 0
        workers = max(num_workers, 1)
        return batch_size * (1 + workers * (prefetch + 1)) + workers * (lookahead + batch_size)

    def _ensure_workspace(self) -> Workspace:
        if self._workspace is None or not self._workspace.owned_here or not self._workspace.exists():
            self._workspace = Workspace.create(self._cache_dir)
            self._cache = None
            self._control = None
        return self._workspace

    def _control_file(self) -> Control:
        workspace = self._ensure_workspace()
        path = os.path.join(workspace.path, "control")
        if self._control is None or self._control.path != path:
            self._control = Control(path)
        return self._control

    def _ensure_cache(self) -> FileCache:
        if self._cache is None:
            workspace = self._workspace
            if workspace is None or not workspace.exists():
                workspace = self._ensure_workspace()  # a worker of a plain torch DataLoader: its own copies
            self._cache = FileCache(
                workspace.path,
                limit_bytes=self.cache_limit_bytes,
                min_free_bytes=self.min_free_bytes,
                filesystem=self._filesystem,
                retry=self._retry,
            )
        return self._cache

    def _check_limit_fits(self, limit: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        def size(index: int) -> int:
            return self._filesystem.stat(self.listing.path(index)).st_size

        with ThreadPoolExecutor(max_workers=self.io_threads) as pool:
            sizes = list(pool.map(size, range(self.listing.count)))
        largest = max(sizes, default=0)
        if largest > limit:
            index = sizes.index(largest)
            raise ValueError(
                f"cache_limit_bytes={limit} is smaller than {self.listing.path(index)} ({largest} bytes), so that "
                "file could never be cached. Raise the limit above the largest file, or pass cache=False."
            )

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_skip_log"] = []
        state["_last_share"] = None  # each process plans its own; no need to ship a list of every file
        return state


def _check_int(name: str, value: Any, minimum: Optional[int]) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an int{bound}, not {value!r}")
