"""Batches for a ``DataLoader`` without worker processes, cut and collated in this process.

What torch's single-process iterator does for an iterable dataset (take ``batch_size`` items, stop at the end or
at a short last batch under ``drop_last``, collate), in a C-level ``islice`` instead of a Python loop per item,
and without the two costs it pays whatever the dataset: a profiler hook on every batch, entered even when no
profiler runs (about 70 us per batch once the training loop has left the CPU's caches cold), and a random seed
drawn for every pass (for worker processes that this loader does not have). With the profiler on, batches are
recorded under torch's own name, so traces read the same.

Used only where it is the same as torch's: a :class:`UCVolumeDataset`, ``num_workers=0``, ``timeout=0`` and no
``pin_memory`` (torch's iterator keeps doing the pinning, with its warnings).
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import torch.autograd

if TYPE_CHECKING:
    import torch.utils.data

_PROFILE_NAME = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


class InProcessBatches:
    """One pass over the loader's dataset, batch by batch, in the calling process."""

    @staticmethod
    def serves(loader: "torch.utils.data.DataLoader") -> bool:
        """True when this iterator gives exactly what torch's single-process iterator would."""
        return loader.num_workers == 0 and loader.timeout == 0 and not loader.pin_memory

    def __init__(self, loader: "torch.utils.data.DataLoader") -> None:
        self._items: Iterator[Any] = iter(loader.dataset)
        self._batch_size: Optional[int] = loader.batch_size
        self._drop_last = bool(loader.drop_last)
        self._collate: Callable[[Any], Any] = loader.collate_fn
        self._loader = loader
        self._ended = False

    def __iter__(self) -> "InProcessBatches":
        return self

    def __len__(self) -> int:
        return len(self._loader)

    def __next__(self) -> Any:
        if torch.autograd._profiler_enabled():
            with torch.autograd.profiler.record_function(_PROFILE_NAME):
                return self._next_batch()
        return self._next_batch()

    def _next_batch(self) -> Any:
        if self._ended:
            raise StopIteration
        size = self._batch_size
        if size is None:  # no batching: each item is collated (converted) on its own
            try:
                return self._collate(next(self._items))
            except StopIteration:
                self._ended = True
                raise
        data = list(islice(self._items, size))
        if len(data) < size:
            self._ended = True
            if not data or self._drop_last:
                raise StopIteration
        return self._collate(data)
