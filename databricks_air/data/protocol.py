"""``Checkpointable``: anything with ``state_dict()`` and ``load_state_dict(state)``."""

from __future__ import annotations

from typing import Any, Dict, Protocol, runtime_checkable

__all__ = ["Checkpointable"]


@runtime_checkable
class Checkpointable(Protocol):
    """An object whose progress can be saved and restored; ``isinstance(x, Checkpointable)`` checks the methods.

    :class:`~databricks.air.data.DataLoader` saves and restores the position of a checkpointable dataset, and
    ``torch.distributed.checkpoint`` treats such objects as ``Stateful``.
    """

    def state_dict(self) -> Dict[str, Any]:
        """The state to save."""
        ...

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        ...
