"""``DataLoader``: torch's DataLoader with the reference's defaults done right, a resumable position, and timings.

Example::

    loader = DataLoader(UCVolumeDataset("/Volumes/main/default/images"), batch_size=32)
    for paths in loader:
        ...
        if step % 100 == 0:
            save({"loader": loader.state_dict(), ...})   # JSON-ready; resume with loader.load_state_dict(...)
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any, Dict, Iterator, Optional, cast

import torch.utils.data
from torch.utils.data._utils.collate import default_collate, default_convert

from databricks.air.data.cursor import EpochCursor, Pass
from databricks.air.data.dataset import Batching, UCVolumeDataset
from databricks.air.data.envelope import Envelope, EnvelopingCollate, RestoringWorkerInit
from databricks.air.data.errors import StateMismatchError
from databricks.air.data.in_process import InProcessBatches
from databricks.air.data.metrics import BatchTimer, Sink, mlflow_sink
from databricks.air.data.protocol import Checkpointable
from databricks.air.data.ranks import process_group

__all__ = ["DataLoader", "default_num_workers"]

_log = logging.getLogger("databricks.air.data")
_TORCH_INIT = inspect.signature(torch.utils.data.DataLoader.__init__)
_GENERIC_STATE_VERSION = 1


def default_num_workers() -> int:
    """The reference's default (6 per rank when distributed, 48 otherwise), capped at this rank's CPUs."""
    dist = process_group()
    distributed = dist is not None and dist.get_world_size() > 1
    reference = 6 if distributed else 48
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        ranks_here = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        ranks_here = 1
    return max(1, min(reference, cpus // ranks_here))


class DataLoader(torch.utils.data.DataLoader):
    """torch's ``DataLoader``, taking the same arguments, with these differences.

    * Defaults: ``num_workers`` is the reference's (6 per rank when a process group of more than one rank is
      initialised, 48 otherwise) capped at the CPUs per rank on this machine; ``prefetch_factor`` is 4 with
      workers and unset without (torch refuses one without workers); ``persistent_workers`` is on with workers
      unless you say otherwise. Any start method works (fork, spawn, forkserver).
    * Around a :class:`UCVolumeDataset`, batches are planned for the whole rank: every rank yields the same
      number of batches, only the last one can be partial, and the order does not depend on ``num_workers``.
    * ``state_dict()`` / ``load_state_dict()`` save and restore the position the training loop has reached (the
      batches it received, not the ones workers prefetched) for a :class:`UCVolumeDataset` or any
      :class:`~databricks.air.data.Checkpointable` dataset; ``set_epoch`` forwards to the dataset.
    * ``metrics``: where per-batch timings go (see :mod:`databricks.air.data.metrics`): ``None`` for the active
      MLflow run if any, ``False`` for nowhere, or a callable ``sink(metrics, step)``.
    """

    def __init__(self, *args: Any, metrics: Any = None, **kwargs: Any) -> None:
        arguments = dict(_TORCH_INIT.bind(None, *args, **kwargs).arguments)
        arguments.pop("self", None)
        arguments.update(arguments.pop("kwargs", {}))
        dataset = arguments["dataset"]
        workers = arguments.setdefault("num_workers", default_num_workers())
        arguments.setdefault("prefetch_factor", 4 if workers > 0 else None)
        arguments.setdefault("persistent_workers", workers > 0)
        self._volume = dataset if isinstance(dataset, UCVolumeDataset) else None
        self._generic = self._volume is None and isinstance(dataset, Checkpointable)
        if self._volume is not None and arguments.get("in_order") is False:
            raise ValueError(
                "DataLoader(in_order=False) hands batches out in any order, so the position of a UCVolumeDataset "
                "could not be saved or its files kept until used; leave in_order=True"
            )
        self._worker_init: Optional[RestoringWorkerInit] = None
        if self._generic or (self._volume is not None and self._volume.on_error == "skip"):
            arguments["collate_fn"] = EnvelopingCollate(_collate_of(arguments), dataset, report_state=self._generic)
        if self._generic:
            self._worker_init = RestoringWorkerInit(arguments.get("worker_init_fn"))
            arguments["worker_init_fn"] = self._worker_init
        self._per_worker: Dict[int, Dict[str, Any]] = {}
        self._metrics_choice = metrics
        self._timer: Optional[BatchTimer] = None
        super().__init__(**arguments)
        self._cursor: Optional[EpochCursor] = None  # the volume dataset's position, which this loader moves
        if self._volume is not None:
            self._cursor = self._volume._attach_loader(
                Batching(
                    batch_size=self.batch_size or 1,  # unbatched: every item is a batch of one
                    drop_last=bool(self.drop_last),
                    num_workers=self.num_workers,
                    prefetch_factor=self.prefetch_factor or 0,
                )
            )

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # (a _Delivery around torch's iterator)
        volume = self._volume
        if volume is None:
            return _Delivery(self, super().__iter__(), None, None)
        cursor = self._cursor
        assert cursor is not None  # (attached with the volume dataset)
        current = volume._begin_pass(workers=self.num_workers)
        if self.num_workers == 0:
            cursor.serve(current)  # iter(dataset) below, or in a subclass's __iter__, reads it
        try:
            inner = InProcessBatches(self) if InProcessBatches.serves(self) else super().__iter__()
        except BaseException:
            cursor.take_served()  # never read: the next direct iteration begins its own pass
            raise
        return _Delivery(self, inner, cursor, current)

    @property
    def epoch(self) -> int:
        """The epoch the next pass reads (the dataset's), e.g. to start a resumed training loop from it."""
        epoch = getattr(self.dataset, "epoch", None)
        if epoch is None:
            raise AttributeError(f"{type(self.dataset).__name__} does not track epochs")
        return epoch

    def set_epoch(self, epoch: int) -> None:
        """Forward to the dataset's ``set_epoch`` (see :meth:`UCVolumeDataset.set_epoch`)."""
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if set_epoch is None:
            raise AttributeError(f"{type(self.dataset).__name__} has no set_epoch(); nothing to forward it to")
        set_epoch(epoch)

    # -- state ------------------------------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The position the training loop has reached, as a small JSON-ready dict."""
        if self._volume is not None:
            state = self._volume.state_dict()
            state.update(num_workers=self.num_workers, batch_size=self.batch_size, drop_last=bool(self.drop_last))
            return state
        self._require_checkpointable("state_dict")
        per_worker = dict(self._per_worker)
        if self.num_workers == 0 and not per_worker:
            per_worker[0] = cast(Checkpointable, self.dataset).state_dict()  # (checked just above)
        return {
            "version": _GENERIC_STATE_VERSION,
            "world_size": _world_size(),
            "num_workers": self.num_workers,
            "per_worker": {str(worker): state for worker, state in sorted(per_worker.items())},
        }

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`: the next ``iter()`` starts with the first batch not yet received.

        Raises :class:`~databricks.air.data.errors.StateMismatchError` (a ``ValueError``) when the state does not
        fit (see :meth:`UCVolumeDataset.load_state_dict`); ``num_workers`` and ``batch_size`` may differ from the
        saved ones for a :class:`UCVolumeDataset`.
        """
        if self._volume is not None:
            self._volume.load_state_dict(state_dict)
            return
        self._require_checkpointable("load_state_dict")
        if not isinstance(state_dict, dict) or state_dict.get("version") != _GENERIC_STATE_VERSION:
            raise StateMismatchError(
                f"unsupported DataLoader state (version {getattr(state_dict, 'get', lambda _: None)('version')!r}); "
                f"expected the dict state_dict() returned, version {_GENERIC_STATE_VERSION}"
            )
        for key, current in (("world_size", _world_size()), ("num_workers", self.num_workers)):
            if state_dict.get(key) != current:
                raise StateMismatchError(
                    f"the DataLoader state was saved with {key}={state_dict.get(key)!r} but this loader has "
                    f"{key}={current}: each worker's dataset state only fits the same grid. Resume with "
                    f"{key}={state_dict.get(key)!r}, or start over without loading it."
                )
        per_worker = {int(worker): state for worker, state in dict(state_dict.get("per_worker", {})).items()}
        if self.num_workers == 0:
            if 0 in per_worker:
                cast(Checkpointable, self.dataset).load_state_dict(per_worker[0])
        else:
            assert self._worker_init is not None
            self._worker_init.states = per_worker
            if self._iterator is not None:  # persistent workers hold the old state: start fresh ones
                self._iterator._shutdown_workers()  # type: ignore[attr-defined]  # (torch's worker iterator)
                self._iterator = None
        self._per_worker = dict(per_worker)

    def _require_checkpointable(self, method: str) -> None:
        if not self._generic:
            raise TypeError(
                f"DataLoader.{method}(): {type(self.dataset).__name__} is not checkpointable; the dataset needs "
                "state_dict() and load_state_dict() methods (see databricks.air.data.Checkpointable)"
            )

    # -- called by the delivery iterator ----------------------------------------------------------------------

    def _receive(self, envelope: Envelope) -> Any:
        if self._cursor is not None and envelope.skipped:
            self._cursor.skip(*envelope.skipped)
            _log.warning(
                "DataLoader: worker %d could not read %s and filled the slot(s) with another file (on_error='skip'; "
                "recorded in state_dict()['skipped'])",
                envelope.worker_id,
                ", ".join(envelope.skipped),
            )
        if envelope.dataset_state is not None:
            self._per_worker[envelope.worker_id] = envelope.dataset_state
        return envelope.batch

    def _batch_timer(self) -> BatchTimer:
        if self._timer is None:
            choice = self._metrics_choice
            sink: Optional[Sink] = None if choice is False else (choice if callable(choice) else mlflow_sink())
            dist = process_group()
            self._timer = BatchTimer(dist.get_rank() if dist is not None else 0, sink)
        return self._timer


class _Delivery:
    """The iterator handed to the training loop: counts what it receives and releases what it has used."""

    def __init__(
        self, loader: DataLoader, inner: Iterator[Any], cursor: Optional[EpochCursor], current: Optional[Pass]
    ) -> None:
        self._loader = loader
        self._inner = inner
        self._cursor = cursor
        self._pass = current
        self._timer = loader._batch_timer()

    def __iter__(self) -> "_Delivery":
        return self

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]

    def __next__(self) -> Any:
        cursor, current = self._cursor, self._pass
        if cursor is not None and current is not None:
            if not cursor.holds(current):
                raise RuntimeError(
                    "the DataLoader's position changed (load_state_dict or set_epoch) while this iteration was "
                    "running; start a new one with iter(loader) (a for loop does)"
                )
            # Asking for the next batch means the previous one has been used: its files may now be evicted.
            cursor.release(current)
        started = self._timer.started()
        try:
            batch = next(self._inner)
        except StopIteration:
            if cursor is not None and current is not None:
                cursor.end(current)
            self._timer.pass_ended()
            raise
        if isinstance(batch, Envelope):
            batch = self._loader._receive(batch)
        if cursor is not None and current is not None:
            cursor.advance(current, current.layout.batch_size)
        self._timer.delivered(started)
        return batch


def _collate_of(arguments: Dict[str, Any]) -> Any:
    collate = arguments.get("collate_fn")
    if collate is not None:
        return collate
    batching = arguments.get("batch_sampler") is not None or arguments.get("batch_size", 1) is not None
    return default_collate if batching else default_convert


def _world_size() -> int:
    dist = process_group()
    return dist.get_world_size() if dist is not None else 1
