"""``Checkpointer``: a training run's model, optimizer, data position and extras, saved and restored as one.

Example (in each rank, after ``init_process_group``; also without a process group, as a world of one)::

    from databricks.air.data import Checkpointer

    checkpointer = Checkpointer("/Volumes/main/default/ckpt/run1", keep=2, every=100)
    start = checkpointer.restore(model=model, optimizer=optimizer, loader=loader, scheduler=scheduler) or 0
    for step in range(start + 1, total_steps + 1):
        ...                                                  # one training step
        if checkpointer.should_save(step):
            checkpointer.save(step, model=model, optimizer=optimizer, loader=loader, scheduler=scheduler)

Each checkpoint is a folder ``step_<N>`` under the checkpointer's folder, written by one ``dcp.save`` through
:class:`~databricks.air.data.UCVolumeWriter`. It holds the model and optimizer state (taken with
``torch.distributed.checkpoint.state_dict``, so that DDP, FSDP2 and plain modules all work, and a checkpoint loads on
another number of ranks), each rank's ``loader.state_dict()`` under a key of its own, the extras, and a record of
the step and the world size. ``UCVolumeWriter`` writes the commit marker (``.metadata``) last, once every rank has
written its files, so a folder without one is a save that did not finish. Nothing is renamed: on a FUSE volume a
rename copies every byte.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import shutil
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar, Union

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from databricks.air import _variables
from databricks.air.data.checkpoint_reader import UCVolumeReader
from databricks.air.data.checkpoint_writer import UCVolumeWriter
from databricks.air.data.errors import (
    CorruptCheckpointError,
    IncompleteCheckpointError,
    LoaderPositionError,
    StateMismatchError,
)
from databricks.air.data.protocol import Checkpointable
from databricks.air.data.ranks import process_group

__all__ = ["Checkpointer", "CHECKPOINT_DIR_VARIABLE"]

CHECKPOINT_DIR_VARIABLE = "AIR_CHECKPOINT_DIR"
"""Where checkpoints go when ``Checkpointer(path=None)``: set by the workload command for its retries."""

_log = logging.getLogger("databricks.air.data")
_FOLDER = re.compile(r"step_(0|[1-9][0-9]*)")
_RECORD = "checkpointer"  # the key of the record: step, world size, plain extras
_RECORD_VERSION = 1
_LOADER = "loader/rank_"
_EXTRA = "extra/"
_WORLD_SIZE_RULES = ("raise", "restart_epoch")
_DAMAGED = (CorruptCheckpointError, IncompleteCheckpointError)

PathLike = Union[str, "os.PathLike[str]"]
T = TypeVar("T")


class Checkpointer:
    """Saves and restores a training run in one folder: a checkpoint per step, the newest ``keep`` kept.

    Args:
        path: the folder of the checkpoints (a volume path, or any local or mounted folder), one training run's.
            ``None``: the ``AIR_CHECKPOINT_DIR`` environment variable, which the workload command sets.
        keep: how many complete checkpoints to keep, the newest; ``None`` keeps them all.
        every: the interval of :meth:`should_save`, in steps.

    Attributes:
        extra: the plain extras of the checkpoint :meth:`restore` restored (``{}`` until one is).
        restored: the folder :meth:`restore` restored, or ``None``.
        skipped: ``(folder, reason)`` for each checkpoint the last :meth:`restore` passed over.
    """

    def __init__(self, path: Optional[PathLike] = None, keep: Optional[int] = 2, every: Optional[int] = None) -> None:
        if path is None:
            path = os.environ.get(CHECKPOINT_DIR_VARIABLE) or None
            if path is None:
                raise ValueError(
                    "Checkpointer: no folder to keep the checkpoints in. Pass one (Checkpointer('/Volumes/.../ckpt'))"
                    f" or set the {CHECKPOINT_DIR_VARIABLE} environment variable."
                )
        for name, value in (("keep", keep), ("every", every)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"Checkpointer: {name} must be an int >= 1 or None, not {value!r}")
        self.path = Path(path)
        self.keep = keep
        self.every = every
        self.extra: Dict[str, Any] = {}
        self.restored: Optional[Path] = None
        self.skipped: List[Tuple[Path, str]] = []
        self._removal: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        return f"Checkpointer({str(self.path)!r}, keep={self.keep!r}, every={self.every!r})"

    def should_save(self, step: int) -> bool:
        """Whether ``step`` is a multiple of ``every`` (step 0 is not)."""
        if self.every is None:
            raise ValueError("Checkpointer.should_save needs an interval: Checkpointer(path, every=N)")
        return step > 0 and step % self.every == 0

    def folder(self, step: int) -> Path:
        """The folder of the checkpoint of ``step``."""
        return self.path / f"step_{step}"

    # -- save ---------------------------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        *,
        model: Optional[torch.nn.Module] = None,
        optimizer: Any = None,
        loader: Any = None,
        **extra: Any,
    ) -> Path:
        """Save the checkpoint of ``step``; every rank calls it. Returns its folder, complete.

        ``model`` and ``optimizer`` (one, or a list, over ``model``'s parameters) are saved as they are held:
        sharded with FSDP2, once with DDP. ``loader`` is anything with ``state_dict()``, such as a
        :class:`~databricks.air.data.DataLoader`; each rank's position is saved. Each extra is saved under its name:
        through ``state_dict()`` if it has ``state_dict()`` and ``load_state_dict()`` (an LR scheduler, a
        GradScaler), else as it is (anything picklable: an int, a dict, a tensor). Like the model, an extra is one
        copy for the run: give every rank the same value.

        Then rank 0 removes the complete checkpoints of earlier steps beyond the newest ``keep``, and the unfinished
        ones of earlier steps, on a thread while training goes on (the next save or restore waits for it; so does the
        end of the process).
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"Checkpointer.save: step must be an int >= 0, not {step!r}")
        rank, world_size = _rank_and_world()
        self.wait_for_removal()
        state = _model_state(model, optimizer)
        plain: Dict[str, Any] = {}
        for name, value in extra.items():
            if isinstance(value, Checkpointable):
                state[_EXTRA + name] = value.state_dict()
            else:
                plain[name] = value
        record = {"version": _RECORD_VERSION, "step": step, "world_size": world_size, "plain": plain}
        try:
            state[_RECORD] = _pickled(record)
        except Exception as error:
            raise TypeError(
                f"Checkpointer.save: an extra cannot be pickled ({error}); pass picklable values, or objects with "
                "state_dict() and load_state_dict()"
            ) from error
        if loader is not None:
            state[f"{_LOADER}{rank}"] = _pickled(loader.state_dict())
        folder = self.folder(step)
        with _dcp_errors():
            dcp.save(state, storage_writer=UCVolumeWriter(folder), no_dist=process_group() is None)
        if rank == 0:
            _note_for_the_launcher(step, folder)
            # Deleting takes time (40 to 60 ms for 256 MiB on a local disk, more on a volume): a thread does it while
            # training goes on. Not a daemon: the process ends once it is done.
            self._removal = threading.Thread(target=self._prune, args=(step,), name="air-checkpoint-removal")
            self._removal.start()
        return folder

    def wait_for_removal(self) -> None:
        """Wait until the checkpoints that the last :meth:`save` removes are deleted."""
        if self._removal is not None:
            self._removal.join()
            self._removal = None

    def _prune(self, saved: int) -> None:
        """Remove the complete checkpoints of steps before ``saved`` beyond the newest ``keep``, and unfinished ones.

        Folders of later steps stay: they are left by a run that went back to an earlier checkpoint (so they did
        not restore: unfinished or damaged), and this run's own save of that step replaces them. Each folder's
        commit marker goes first, so that a folder half deleted reads as unfinished.
        """
        kept = 1  # the one just saved
        for step, folder in _step_folders(self.path):
            if step >= saved:
                continue
            if _committed(folder) and (self.keep is None or kept < self.keep):
                kept += 1
                continue
            with contextlib.suppress(FileNotFoundError):
                (folder / ".metadata").unlink()
            shutil.rmtree(folder, ignore_errors=True)

    # -- restore ------------------------------------------------------------------------------------------------

    def restore(
        self,
        *,
        model: Optional[torch.nn.Module] = None,
        optimizer: Any = None,
        loader: Any = None,
        on_world_size_change: str = "raise",
        **extra: Any,
    ) -> Optional[int]:
        """Restore the newest complete checkpoint into the objects given; every rank calls it. Returns its step, or
        ``None`` when there is none.

        ``model``, ``optimizer`` and each extra (objects with ``load_state_dict()``) are loaded in place, on any
        number of ranks (DCP reshards). The plain extras come back in :attr:`extra`. ``loader`` gets this rank's
        saved position when the checkpoint was saved on as many ranks as this run has. When it was not, everything
        else is restored and then ``on_world_size_change`` decides: ``"raise"`` (the default) raises
        :class:`~databricks.air.data.errors.LoaderPositionError`, whose ``step`` and ``epoch`` say where to go on
        from; ``"restart_epoch"`` logs a warning and starts the saved epoch over (``loader.set_epoch``).

        Folders without a commit marker, and checkpoints whose metadata or checksums fail, are passed over: rank 0
        logs a warning naming each, and :attr:`skipped` lists them. When every complete checkpoint fails, this raises
        :class:`~databricks.air.data.errors.CorruptCheckpointError`. A checkpoint that lacks something asked for (an
        optimizer, an extra, a loader position) raises :class:`~databricks.air.data.errors.StateMismatchError`.
        """
        if on_world_size_change not in _WORLD_SIZE_RULES:
            raise ValueError(f"on_world_size_change must be one of {_WORLD_SIZE_RULES}, not {on_world_size_change!r}")
        for name, value in extra.items():
            if not isinstance(value, Checkpointable):
                raise TypeError(
                    f"Checkpointer.restore({name}=...): only objects with load_state_dict() are restored in place; "
                    f"plain values saved with save() come back in checkpointer.extra[{name!r}]"
                )
        self.extra, self.restored, self.skipped = {}, None, []
        self.wait_for_removal()
        rank, world_size = _rank_and_world()
        for _step, folder in _on_rank_zero(lambda: _step_folders(self.path)):
            keys = _on_rank_zero(lambda: _saved_keys(folder))
            if isinstance(keys, str):
                self._skip(folder, keys)
                continue
            positions = sorted(int(key[len(_LOADER) :]) for key in keys if key.startswith(_LOADER))
            same_world = positions == list(range(world_size))
            state = _template(folder, keys, model, optimizer, loader, extra, rank if same_world else 0)
            try:
                with _dcp_errors():
                    dcp.load(state, storage_reader=UCVolumeReader(folder), no_dist=process_group() is None)
            except _DAMAGED as error:
                self._skip(folder, str(error))
                continue
            return self._apply(state, folder, model, optimizer, loader, extra, same_world, on_world_size_change)
        damaged = [(found, why) for found, why in self.skipped if _committed(found)]
        if damaged:
            raise CorruptCheckpointError(
                f"no checkpoint under {self.path} could be restored: "
                + "; ".join(f"{found.name}: {why}" for found, why in damaged)
                + ". What loaded before a check failed may have changed the model and optimizer: build them again "
                "before training from the start, or put a good checkpoint back into this folder.",
                path=str(self.path),
            )
        return None

    def _skip(self, folder: Path, reason: str) -> None:
        self.skipped.append((folder, reason))
        if _rank_and_world()[0] == 0:
            _log.warning("Checkpointer: skipped %s: %s", folder, reason)

    def _apply(
        self,
        state: Dict[str, Any],
        folder: Path,
        model: Any,
        optimizer: Any,
        loader: Any,
        extra: Dict[str, Any],
        same_world: bool,
        rule: str,
    ) -> int:
        """Hand the loaded state to the objects; the loader last, if its world size allows."""
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        record = pickle.loads(state[_RECORD])
        if record.get("version") != _RECORD_VERSION:
            raise StateMismatchError(
                f"the checkpoint {folder} has an unknown format (version {record.get('version')!r})"
            )
        if optimizer is not None:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        elif model is not None:
            set_model_state_dict(model, state["model"])
        for name, value in extra.items():
            value.load_state_dict(state[_EXTRA + name])
        step = record["step"]
        self.extra = record["plain"]
        self.restored = folder
        if loader is None:
            return step
        (position,) = [pickle.loads(value) for key, value in state.items() if key.startswith(_LOADER)]
        saved_world, world_size = record["world_size"], _rank_and_world()[1]
        if same_world:
            loader.load_state_dict(position)
            return step
        restored = [name for name, value in (("model", model), ("optimizer", optimizer)) if value is not None]
        restored += [*extra, *(["the plain extras"] if self.extra else [])]
        epoch = position.get("epoch") if isinstance(position, dict) else None
        message = (
            f"restored {', '.join(restored) or 'the step'} from {folder} (step {step}) but not the loader position"
            f"{f' (epoch {epoch})' if epoch is not None else ''}: it was saved by {saved_world} rank(s) and this run "
            f"has {world_size}. A position belongs to the split of the files over the ranks that saved it; on "
            "another number of ranks it would read some files twice and others never."
        )
        if rule == "restart_epoch":
            if epoch is not None and hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
                message += f" The loader starts epoch {epoch} over."
            else:
                message += " The loader starts where it is."
            if _rank_and_world()[0] == 0:
                _log.warning("Checkpointer: %s", message)
            return step
        error = LoaderPositionError(
            message + f" Catch LoaderPositionError to go on from step {step} with the loader where it is (e.g. "
            "loader.set_epoch(error.epoch)), or pass on_world_size_change='restart_epoch' to restore().",
            path=str(folder),
        )
        error.step, error.epoch, error.saved_world_size, error.world_size = step, epoch, saved_world, world_size
        raise error


def _note_for_the_launcher(step: int, folder: Path) -> None:
    """Tell the call's launcher the step just saved (its restart line says where the next attempt resumes); a note
    that cannot be written costs the line its step, never the save."""
    path = os.environ.get(_variables.LAST_CHECKPOINT_FILE)
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as note:
            note.write(f"{step} {folder}\n")
    except OSError:
        pass


def _template(
    folder: Path,
    keys: List[str],
    model: Any,
    optimizer: Any,
    loader: Any,
    extra: Dict[str, Any],
    loader_rank: int,
) -> Dict[str, Any]:
    """What ``dcp.load`` fills: the current state of each object asked for, once the checkpoint is known to hold it."""
    if _RECORD not in keys:
        raise StateMismatchError(
            f"{folder} holds no Checkpointer record: it was not written by Checkpointer.save (load it with dcp.load "
            "and UCVolumeReader, or move it out of the checkpointer's folder)"
        )
    asked = {"model": model, "optimizer": optimizer, **{_EXTRA + name: value for name, value in extra.items()}}
    missing = [key.replace(_EXTRA, "") for key, value in asked.items() if value is not None and key not in keys]
    if loader is not None and not any(key.startswith(_LOADER) for key in keys):
        missing.append("loader position")
    if missing:
        held = [key.replace(_EXTRA, "") for key in keys if not key.startswith(_LOADER) and key != _RECORD]
        held += ["the loader positions"] if any(key.startswith(_LOADER) for key in keys) else []
        raise StateMismatchError(
            f"the checkpoint {folder} has no {', '.join(missing)}: it was saved without it (it holds "
            f"{', '.join(held) or 'nothing else'}). Restore without it, or from a checkpoint that holds it."
        )
    state = _model_state(model, optimizer)
    for name, value in extra.items():
        state[_EXTRA + name] = value.state_dict()
    if loader is not None:
        state[f"{_LOADER}{loader_rank}"] = b""  # the saved bytes replace it
    state[_RECORD] = b""
    return state


def _pickled(value: Any) -> bytes:
    """``value`` as one opaque object for DCP, which would otherwise save a dict key by key, each needing a
    template to load into."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _rank_and_world() -> Tuple[int, int]:
    dist = process_group()
    return (dist.get_rank(), dist.get_world_size()) if dist is not None else (0, 1)


def _on_rank_zero(compute: Callable[[], T]) -> T:
    """``compute()``'s value (or exception) on rank 0, on every rank: so that all ranks take the same folders."""
    dist = process_group()
    if dist is None or dist.get_world_size() == 1:
        return compute()
    box: List[Any] = [None]
    if dist.get_rank() == 0:
        try:
            box[0] = (True, compute())
        except Exception as error:  # noqa: BLE001 - broadcast to every rank, which raises it there
            box[0] = (False, error)
    dist.broadcast_object_list(box, src=0)
    succeeded, value = box[0]
    if not succeeded:
        raise value
    return value


def _model_state(model: Optional[torch.nn.Module], optimizer: Any) -> Dict[str, Any]:
    """The model's and optimizer's state as DCP saves it: sharded as held (FSDP2), names without wrappers (DDP)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is not None:
        if model is None:
            raise ValueError("Checkpointer: an optimizer is saved and restored with its model; pass model= too")
        model_state, optimizer_state = get_state_dict(model, optimizer)
        return {"model": model_state, "optimizer": optimizer_state}
    return {"model": get_model_state_dict(model)} if model is not None else {}


def _step_folders(root: Path) -> List[Tuple[int, Path]]:
    """``(step, folder)`` of each ``step_<N>`` folder under ``root``, the newest first."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    found = [
        (int(match.group(1)), Path(entry.path))
        for entry in entries
        if (match := _FOLDER.fullmatch(entry.name)) and entry.is_dir()
    ]
    return sorted(found, reverse=True)


def _committed(folder: Path) -> bool:
    return (folder / ".metadata").exists()


def _saved_keys(folder: Path) -> Union[List[str], str]:
    """The top-level names the checkpoint in ``folder`` holds, or why it cannot be restored."""
    if not _committed(folder):
        return "unfinished: no .metadata (its save did not finish)"
    try:
        metadata = UCVolumeReader(folder).read_metadata()
    except _DAMAGED as error:
        return str(error)
    return sorted({fqn.split(".", 1)[0] for fqn in metadata.state_dict_metadata})


@contextlib.contextmanager
def _dcp_errors() -> Iterator[None]:
    """Around ``dcp.save``/``dcp.load``: a rank's own exception in place of DCP's ``CheckpointException`` (a
    ``BaseException``, which ``except Exception`` misses). A damaged checkpoint (the only failure
    :meth:`Checkpointer.restore` passes over) is raised only when every failing rank saw damage.

    Also hides the warnings DCP gives about what a Checkpointer does on purpose (one process without a process
    group; writing over an unfinished save).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch\.distributed is disabled")
        warnings.filterwarnings("ignore", message=r"Detected an existing checkpoint")
        try:
            yield
        except CheckpointException as error:
            failures = [f[0] if isinstance(f, tuple) else f for _, f in sorted(error.failures.items())]
            worst = [failure for failure in failures if not isinstance(failure, _DAMAGED)] or failures
            if not worst:
                raise
            raise worst[0] from error
