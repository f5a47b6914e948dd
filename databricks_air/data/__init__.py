"""``databricks.air.data``: stream the files of a volume into training, resume mid-epoch, checkpoint with DCP.

* :class:`UCVolumeDataset` yields the local paths of a folder's files (a Unity Catalog volume or any local or
  mounted folder), each exactly once per epoch, split so that every rank gets the same number of batches.
* :class:`DataLoader` is torch's DataLoader with sensible defaults and a resumable ``state_dict()``.
* :class:`Checkpointable` is the protocol of objects with ``state_dict()`` / ``load_state_dict()``.
* :class:`UCVolumeWriter` / :class:`UCVolumeReader` are ``torch.distributed.checkpoint`` storage for volume paths:
  a commit marker written last, per-file checksums checked on load.
* :class:`Checkpointer` saves and restores a training run (model, optimizer, each rank's loader position, extras)
  as ``step_<N>`` checkpoints over those, restoring the newest complete one and keeping the newest few.
"""

from __future__ import annotations

from databricks.air.data.checkpoint_reader import UCVolumeReader
from databricks.air.data.checkpoint_writer import UCVolumeWriter
from databricks.air.data.checkpointer import Checkpointer
from databricks.air.data.dataset import UCVolumeDataset
from databricks.air.data.loader import DataLoader
from databricks.air.data.protocol import Checkpointable

__all__ = ["Checkpointable", "Checkpointer", "DataLoader", "UCVolumeReader", "UCVolumeWriter", "UCVolumeDataset"]
