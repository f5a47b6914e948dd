"""``UCVolumeWriter``: a ``torch.distributed.checkpoint`` storage writer for volume (or any) paths.

Use it exactly like torch's ``FileSystemWriter``::

    import torch.distributed.checkpoint as dcp
    from databricks.air.data import UCVolumeWriter

    dcp.save(state_dict, storage_writer=UCVolumeWriter("/Volumes/main/default/ckpt/step_100"))

What it adds to ``FileSystemWriter`` (whose format it keeps: torch's reader loads its checkpoints):

* **Commit marker last, old one first.** ``.metadata`` marks a complete checkpoint. Before any rank writes a data
  file, the coordinator removes the ``.metadata`` of a checkpoint being overwritten, so a save that dies part-way
  leaves a folder that reads as incomplete, never one that mixes two saves. The new ``.metadata`` is written to a
  temporary name, synced, renamed into place, and the folder is synced.
* **Checksums.** Each data file's CRC-32 per 4 MiB block is computed while it is written and recorded in
  ``.checksums.json`` (before the commit marker); :class:`~databricks.air.data.UCVolumeReader` checks every byte it
  loads and names the damaged file.
* **No scratch.** Data files are written once, in place, at their final names (a rename on a FUSE volume is a full
  copy): nothing is staged on local disk, so nothing is left behind.
* **No orphans.** Data files of an earlier save into the same folder that the new metadata does not list (a save
  from a larger world) are removed after the commit.
* **Durability.** With ``sync_files=True`` (the default) every data file is fsync'd before it is closed, on the
  volume itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Generator, List, Union

from torch.futures import Future
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult

from databricks.air.data.checksums import ChecksummingStream, write_manifest

__all__ = ["UCVolumeWriter", "MANIFEST_NAME", "is_volume_checkpoint_id"]

MANIFEST_NAME = ".checksums.json"
_METADATA_NAME = ".metadata"
_DATA_FILE = re.compile(r"__\d+_\d+\.distcp")


def is_volume_checkpoint_id(checkpoint_id: Union[str, "os.PathLike[str]"]) -> bool:
    """True for a path under ``/Volumes/``, and for any local path whose parent torch could write to."""
    text = os.fspath(checkpoint_id)
    if "://" in text:
        return False
    return text.startswith("/Volumes/") or FileSystem.validate_checkpoint_id(checkpoint_id)


@dataclasses.dataclass
class _CheckedStorageInfo(_StorageInfo):
    """Storage info that carries its file's checksum record from a rank to the coordinator (never saved)."""

    file_checksum: Any = None


class _ChecksummingFileSystem(FileSystem):
    """torch's local file system, except that data files are hashed as they are written."""

    def __init__(self, on_file: Any) -> None:
        self._on_file = on_file

    @contextmanager
    def create_stream(self, path: Union[str, "os.PathLike[str]"], mode: str) -> Generator[Any, None, None]:
        name = os.path.basename(os.fspath(path))
        if "w" not in mode or not name.endswith(".distcp"):
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        raw = open(path, mode)
        stream = ChecksummingStream(raw, lambda record: self._on_file(name, record))
        try:
            yield stream
        finally:
            stream.close()


class UCVolumeWriter(FileSystemWriter):
    """``FileSystemWriter`` for volume paths, with a safe commit and per-file checksums.

    Takes ``FileSystemWriter``'s arguments (``single_file_per_rank``, ``sync_files``, ``thread_count``,
    ``per_thread_copy_ahead``, ``cache_staged_state_dict``, ``overwrite``), so ``dcp.async_save`` works as with
    torch's writer. Any local or mounted path works; ``/Volumes`` is not required.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *args: Any, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        self.fs = _ChecksummingFileSystem(self._record_file)
        self._file_records: Dict[str, Dict[str, Any]] = {}
        self._records_lock = threading.Lock()

    def _record_file(self, name: str, record: Dict[str, Any]) -> None:
        with self._records_lock:
            self._file_records[name] = record

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        with self._records_lock:
            self._file_records = {}

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        plan = super().prepare_local_plan(plan)
        if not self.use_collectives and self.rank is not None:
            self._remove_commit(f"__{self.rank}")
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        plans = super().prepare_global_plan(plans)
        # Runs on the coordinator before any rank writes data: from now on the folder reads as incomplete.
        self._remove_commit("")
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> "Future[List[WriteResult]]":
        results = super().write_data(plan, planner).wait()
        written = {result.index for result in results}
        lost = [item.index.fqn for item in plan.items if item.index not in written]
        if lost:
            # torch's writer threads die quietly; their items would be missing from a "complete" checkpoint.
            raise RuntimeError(
                f"checkpoint {self.path}: {len(lost)} item(s) were not written ({', '.join(sorted(set(lost))[:5])}"
                f"{' ...' if len(set(lost)) > 5 else ''}): a writer thread failed (its error is printed above). "
                "Nothing was committed; save again."
            )
        with self._records_lock:
            records = dict(self._file_records)
        attached = set()
        checked = []
        for result in results:
            info = result.storage_data
            record = None
            if info.relative_path not in attached:
                record = records.get(info.relative_path)
                attached.add(info.relative_path)
            fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(_StorageInfo)}
            info = _CheckedStorageInfo(**fields, file_checksum=record)
            checked.append(dataclasses.replace(result, storage_data=info))
        future: Future = Future()
        future.set_result(checked)
        return future

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        files: Dict[str, Dict[str, Any]] = {}
        plain: List[List[WriteResult]] = []
        for rank_results in results:
            converted = []
            for result in rank_results:
                info = result.storage_data
                if isinstance(info, _CheckedStorageInfo):
                    if info.file_checksum is not None:
                        files[info.relative_path] = info.file_checksum
                    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(_StorageInfo)}
                    result = dataclasses.replace(result, storage_data=_StorageInfo(**fields))
                converted.append(result)
            plain.append(converted)
        prefix = f"__{self.rank}" if not self.use_collectives and self.rank is not None else ""
        folder = Path(self.path)
        write_manifest(str(folder / f"{prefix}{MANIFEST_NAME}"), self.save_id, files, self.sync_files)
        super().finish(metadata, plain)  # writes .metadata.tmp, syncs it, renames it into place
        if self.sync_files:
            _sync_folder(folder)
        if not prefix:
            _remove_orphans(folder, set(files) | {info.relative_path for r in plain for info in _infos(r)})

    def _remove_commit(self, prefix: str) -> None:
        folder = Path(self.path)
        removed = False
        for name in (f"{prefix}{_METADATA_NAME}", f"{prefix}{MANIFEST_NAME}"):
            try:
                (folder / name).unlink()
                removed = True
            except FileNotFoundError:
                pass
        if removed and self.sync_files:
            _sync_folder(folder)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, "os.PathLike[str]"]) -> bool:
        return is_volume_checkpoint_id(checkpoint_id)


def _infos(results: List[WriteResult]) -> List[_StorageInfo]:
    return [result.storage_data for result in results]


def _sync_folder(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass  # some FUSE mounts cannot sync a folder; the files themselves were synced
    finally:
        os.close(descriptor)


def _remove_orphans(folder: Path, kept: set) -> None:
    """Delete data files of earlier saves into this folder that the new metadata does not list."""
    for entry in os.scandir(folder):
        if _DATA_FILE.fullmatch(entry.name) and entry.name not in kept:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
