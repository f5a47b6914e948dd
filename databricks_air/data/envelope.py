"""What travels with each batch from a worker to the main process, besides the batch itself.

torch's DataLoader sends only what the collate function returns, so the collate function is wrapped: it returns
an :class:`Envelope` holding the batch, the producing worker's id, and whatever that worker has to report (the
files it skipped; for a checkpointable dataset of another kind, its ``state_dict()`` after the batch). The main
process unwraps each envelope before handing the batch on, so the state it keeps describes what the training
loop has received, not what the workers have prefetched.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, cast

from torch.utils.data import get_worker_info

from databricks.air.data.protocol import Checkpointable


class Envelope:
    """A batch and its producing worker's report."""

    __slots__ = ("batch", "worker_id", "skipped", "dataset_state")

    def __init__(self, batch: Any, worker_id: int, skipped: List[str], dataset_state: Optional[Dict[str, Any]]):
        self.batch = batch
        self.worker_id = worker_id
        self.skipped = skipped
        self.dataset_state = dataset_state

    def pin_memory(self, device: Optional[str] = None) -> "Envelope":
        """Called by torch's pin-memory thread: pin the batch, keep the report."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.batch = pin_memory(self.batch, device) if device else pin_memory(self.batch)
        return self


class EnvelopingCollate:
    """Runs the real collate function, then wraps its result in an :class:`Envelope`. Picklable for spawn."""

    def __init__(self, collate: Callable[[Any], Any], dataset: Any, report_state: bool) -> None:
        self.collate = collate
        self.dataset = dataset
        self.report_state = report_state

    def __call__(self, samples: Any) -> Envelope:
        batch = self.collate(samples)
        info = get_worker_info()
        dataset: Any = info.dataset if info is not None else self.dataset
        skipped: List[str] = []
        log = getattr(dataset, "_skip_log", None)
        if log:
            skipped = list(log)
            log.clear()
        state = dataset.state_dict() if self.report_state else None
        return Envelope(batch, info.id if info is not None else 0, skipped, state)

    def __getstate__(self) -> Dict[str, Any]:
        # A worker reports on its own copy of the dataset (get_worker_info().dataset): no need to ship another.
        return {"collate": self.collate, "dataset": None, "report_state": self.report_state}


class RestoringWorkerInit:
    """Loads each worker's saved dataset state when the worker starts, then runs the user's ``worker_init_fn``."""

    def __init__(self, user_init: Optional[Callable[[int], None]]) -> None:
        self.user_init = user_init
        self.states: Dict[int, Dict[str, Any]] = {}

    def __call__(self, worker_id: int) -> None:
        if self.user_init is not None:
            self.user_init(worker_id)
        state = self.states.get(worker_id)
        if state is not None:
            info = get_worker_info()
            assert info is not None  # (worker_init_fn runs in a DataLoader worker)
            cast(Checkpointable, info.dataset).load_state_dict(state)  # (torch types it as any Dataset)
