"""The file format of arguments and return values travelling between the caller and the ranks.

Values are pickled with cloudpickle, so classes and functions defined in a notebook travel by value (and come back
as the caller's own classes: cloudpickle tracks their identity), with their file names and source
(:mod:`databricks.air._engine.by_value`). A value holding torch tensors is written with
``torch.save`` instead, which stores tensor bytes raw rather than copying them through the pickle stream; a value
without tensors never makes the reader import torch.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
from typing import Any, BinaryIO

from databricks.air._engine import by_value

_PLAIN = b"AIR-PICKLE-1\n"
_TORCH = b"AIR-TORCH-1\n"


class _HasTensorStorage(Exception):
    """Raised by the probe pickler on the first tensor storage it meets."""


class _ProbePickler(by_value.Pickler):
    """Our cloudpickle pickler that refuses tensor storages, so that such values go through ``torch.save``."""

    def persistent_id(self, obj: Any) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, (torch.UntypedStorage, torch.storage.TypedStorage)):
            raise _HasTensorStorage
        return None


def dump_value(value: Any, stream: BinaryIO) -> None:
    """Write ``value`` to a binary stream (raises whatever pickling raises)."""
    if "torch" in sys.modules:
        buffer = io.BytesIO()
        try:
            _ProbePickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
        except _HasTensorStorage:
            import torch

            stream.write(_TORCH)
            torch.save(value, stream, pickle_module=by_value)  # its Pickler
            return
        stream.write(_PLAIN)
        stream.write(buffer.getbuffer())
        return
    stream.write(_PLAIN)
    by_value.Pickler(stream).dump(value)


def write_value_file(value: Any, path: str) -> None:
    """Write ``value`` to ``path`` atomically: a reader sees the whole file or none."""
    partial = f"{path}.partial"
    try:
        with open(partial, "wb") as stream:
            dump_value(value, stream)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def read_value_file(path: str) -> Any:
    """Read a value written by :func:`write_value_file`."""
    with open(path, "rb") as stream:
        return load_value(stream, path)


def load_value(stream: BinaryIO, name: str = "the stream") -> Any:
    """Read a value written by :func:`dump_value` (``name`` says where from, for the error)."""
    head = stream.readline()
    if head == _PLAIN:
        return pickle.load(stream)
    if head == _TORCH:
        import torch

        return torch.load(stream, weights_only=False)
    raise ValueError(f"{name} is not a databricks.air value file")
