"""``UCVolumeReader``: a ``torch.distributed.checkpoint`` storage reader that checks what it loads.

Use it exactly like torch's ``FileSystemReader``::

    dcp.load(state_dict, storage_reader=UCVolumeReader("/Volumes/main/default/ckpt/step_100"))

It reads any checkpoint torch's ``FileSystemWriter`` wrote. For one written by
:class:`~databricks.air.data.UCVolumeWriter` it also checks every byte it loads against the checksums recorded
at save time, and commits nothing from a damaged block: the load fails with
:class:`~databricks.air.data.errors.CorruptCheckpointError` naming the file. A folder without ``.metadata`` fails
with :class:`~databricks.air.data.errors.IncompleteCheckpointError` ("incomplete checkpoint at ...").

``dcp.load`` wraps every error of a rank in ``torch.distributed.checkpoint.api.CheckpointException``, which is a
``BaseException``: catch that (its ``failures`` map each rank to its original exception), not ``Exception``.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from collections import deque
from typing import IO, Any, Deque, Dict, List, Optional, Tuple, Union, cast

import torch
from torch.futures import Future
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed._shard._utils import narrow_tensor_by_index

from databricks.air.data.checkpoint_writer import MANIFEST_NAME, is_volume_checkpoint_id
from databricks.air.data.checksums import FileVerifier, read_manifest
from databricks.air.data.errors import CorruptCheckpointError, IncompleteCheckpointError

__all__ = ["UCVolumeReader"]

_HOLD_BYTES = 64 * 1024 * 1024  # how many bytes of loaded items may wait for the reads that complete their blocks


class UCVolumeReader(FileSystemReader):
    """``FileSystemReader`` for volume paths that verifies checksums and explains incomplete checkpoints."""

    def __init__(self, path: Union[str, "os.PathLike[str]"], *args: Any, verify: bool = True, **kwargs: Any) -> None:
        """``verify=False`` skips the checksums (CRC-32 costs about one CPU-second per 25 GB with ISA-L, per 5 GB
        with zlib, on one core of a small VM)."""
        super().__init__(path, *args, **kwargs)
        self.verify = verify
        self._manifest: Optional[Dict[str, Any]] = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        folder = Path(self.path)
        rank = kwargs.get("rank")
        metadata_path = Path(self._get_metadata_path(rank))
        if not folder.is_dir():
            raise IncompleteCheckpointError(
                f"no checkpoint at {folder}: the folder does not exist (or is not a folder)", path=str(folder)
            )
        if not metadata_path.exists() and rank is not None:
            raise IncompleteCheckpointError(
                f"no {metadata_path.name} in {folder} either (only saves with use_collectives=False write one)",
                path=str(folder),
            )
        if not metadata_path.exists():
            raise IncompleteCheckpointError(
                f"incomplete checkpoint at {folder}: {metadata_path.name} missing. Its save did not finish (or "
                "this folder is not a checkpoint); load an earlier checkpoint.",
                path=str(folder),
            )
        try:
            return super().read_metadata(*args, **kwargs)
        except (pickle.UnpicklingError, EOFError, AttributeError, ValueError, TypeError, IndexError) as error:
            raise CorruptCheckpointError(
                f"checkpoint metadata {metadata_path} is unreadable (truncated or damaged): {error}. Load an "
                "earlier checkpoint.",
                path=str(metadata_path),
            ) from error

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        prefix = f"__{self.rank}" if not self.use_collectives and self.rank is not None else ""
        manifest_path = Path(self.path) / f"{prefix}{MANIFEST_NAME}"
        manifest = read_manifest(str(manifest_path))
        if manifest is not None:
            save_id = getattr(metadata.storage_meta, "save_id", None)
            if save_id is not None and manifest.get("save_id") != save_id:
                raise CorruptCheckpointError(
                    f"{manifest_path} belongs to another save than {Path(self.path) / '.metadata'}: the folder "
                    "mixes two saves. Load an earlier checkpoint.",
                    path=str(manifest_path),
                )
        self._manifest = manifest

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "Future[None]":
        if self._manifest is None or not self.verify:
            return super().read_data(plan, planner)  # no checksums to check: torch's own reader
        per_file: Dict[str, List[ReadItem]] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for relative_path, items in per_file.items():
            self._read_file(relative_path, items, planner)
        done: Future = Future()
        done.set_result(None)
        return done

    def _read_file(self, relative_path: str, items: List[ReadItem], planner: LoadPlanner) -> None:
        path = str(Path(self.path) / relative_path)
        record = self._manifest["files"].get(relative_path) if self._manifest else None
        if record is None:
            raise CorruptCheckpointError(
                f"{path} is not in the checkpoint's checksum manifest: the folder mixes two saves", path=path
            )
        verifier = FileVerifier(path, record)
        verifier.check_size()
        items = sorted(items, key=lambda item: self.storage_data[item.storage_index].offset)
        # A small item is committed once the items after it have been read up to the end of the block it ends in:
        # that block usually holds the start of the next items too, and is then checked from what their reads
        # hashed instead of being read a second time. At most _HOLD_BYTES of items wait.
        held: Deque[Tuple[ReadItem, Any, int]] = deque()  # (item, payload, end of the block it ends in)
        held_bytes = 0
        with open(path, "rb") as stream:
            for item in items:
                info = self.storage_data[item.storage_index]
                window = cast(
                    IO[bytes], _FileWindow(stream, info.offset, info.length, verifier)
                )  # (torch asks for an IO)
                try:
                    view = self.transforms.transform_load_stream(item, info.transform_descriptors or (), window)
                    if item.type == LoadItemType.BYTE_IO:
                        payload: Any = io.BytesIO(view.read(-1))
                    else:
                        payload = torch.load(_seekable(view), map_location="cpu", weights_only=True)
                except BaseException:
                    verifier.verify(info.offset, info.length)  # a damaged file explains a failed load best
                    raise
                read_up_to = info.offset + info.length
                while held and (held[0][2] <= read_up_to or held_bytes + info.length > _HOLD_BYTES):
                    earlier, earlier_payload, _ = held.popleft()
                    held_bytes -= self.storage_data[earlier.storage_index].length
                    self._commit(earlier, earlier_payload, planner, relative_path, verifier)
                if info.length <= _HOLD_BYTES:
                    held.append((item, payload, verifier.block_end(read_up_to)))
                    held_bytes += info.length
                else:
                    self._commit(item, payload, planner, relative_path, verifier)
        for earlier, earlier_payload, _ in held:
            self._commit(earlier, earlier_payload, planner, relative_path, verifier)

    def _commit(
        self, item: ReadItem, payload: Any, planner: LoadPlanner, relative_path: str, verifier: FileVerifier
    ) -> None:
        """Hand a loaded item to the planner, once every byte of it has passed its check."""
        info = self.storage_data[item.storage_index]
        verifier.verify(info.offset, info.length)
        if item.type == LoadItemType.BYTE_IO:
            payload.seek(0)
            planner.load_bytes(item, payload)
            return
        tensor = narrow_tensor_by_index(payload, item.storage_offsets, item.lengths)
        target = planner.resolve_tensor(item).detach()
        if target.size() != tensor.size():
            raise ValueError(
                f"checkpoint {self.path}: {item.storage_index.fqn} has shape {tuple(tensor.size())} in "
                f"{relative_path} but the state dict expects {tuple(target.size())}"
            )
        target.copy_(tensor)
        planner.commit_tensor(item, target)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, "os.PathLike[str]"]) -> bool:
        return is_volume_checkpoint_id(checkpoint_id)


class _FileWindow(io.RawIOBase):
    """A read-only, seekable view of ``length`` bytes of an open file, starting at ``offset``.

    What it reads is handed to the verifier block by block, so checksums are computed on helper threads while
    the next block is read, rather than by reading the file a second time.
    """

    def __init__(self, stream: io.BufferedIOBase, offset: int, length: int, verifier: FileVerifier) -> None:
        super().__init__()
        self._stream = stream
        self._offset = offset
        self._length = length
        self._position = 0
        self._verifier = verifier

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        self._position = min(max(base + offset, 0), self._length)
        return self._position

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self._length - self._position)
        if want <= 0:
            return 0
        target = memoryview(buffer).cast("B")[:want]
        start = self._offset + self._position
        self._stream.seek(start)
        checks = []
        done = 0
        block_size = self._verifier.record["block_size"]
        while done < want:
            # Read up to the next block boundary of the file, so each full block can be checked as it lands.
            step = min(want - done, block_size - (start + done) % block_size)
            got = self._stream.readinto(target[done : done + step]) or 0
            if got == 0:
                break
            checks += self._verifier.absorb(start + done, target[done : done + got])
            done += got
        for check in checks:
            check.result()
        self._position += done
        return done


def _seekable(view: IO[bytes]) -> IO[bytes]:
    if view.seekable():
        return view
    return cast(IO[bytes], io.BytesIO(view.read(-1)))
