"""Accelerator types, and which accelerators this machine has.

``AcceleratorType`` is the user-facing shape (a GPU model and how many GPUs a node has); ``GPUType`` is the older
spelling that names only the model. Both parse case-insensitively, as the reference does; ``AcceleratorType.CPU``
is our addition for laptops and CI (``accelerator_type="CPU"``, or ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU``).

GPUs are counted and named through NVML (the library behind ``nvidia-smi``), honouring ``CUDA_VISIBLE_DEVICES``, so
the caller never initialises CUDA. Any CUDA model runs; H100, A10 and B300 also map to the reference's shapes.
"""

from __future__ import annotations

import ctypes
import enum
import os
import re
from typing import List, Optional, Union

from databricks.air import _variables
from databricks.air.exceptions import GPUTypeError

__all__ = [
    "GPUType",
    "AcceleratorType",
    "DisplayGpuType",
    "get_gpus_per_node",
    "get_display_gpu_type",
    "attached_gpu_count",
    "attached_gpu_name",
    "parse_gpu_model",
]

CPU = "CPU"


class GPUType(enum.Enum):
    """A GPU model, in the older ``gpu_type`` spelling (deprecated: use :class:`AcceleratorType`)."""

    H100 = "h100_80gb"
    A10 = "a10"
    B300 = "b300"

    @classmethod
    def _missing_(cls, value: object) -> "GPUType":
        if isinstance(value, str):
            key = value.strip().lower()
            for member in cls:
                if key in (member.value, member.name.lower()):
                    return member
            if key == "a10g":
                return cls.A10
        raise GPUTypeError(f"unknown GPU type {value!r}; expected one of {cls.names()} (case-insensitive)")

    @classmethod
    def values(cls) -> List[str]:
        """The members' values: ``["h100_80gb", "a10", "b300"]``."""
        return [member.value for member in cls]

    @classmethod
    def names(cls) -> List[str]:
        """The members' names in lower case, as error messages list them: ``["h100", "a10", "b300"]``."""
        return [member.name.lower() for member in cls]


class AcceleratorType(enum.Enum):
    """A GPU model and the number of GPUs per node, e.g. ``GPU_8xH100``; or ``CPU`` ranks (our addition)."""

    GPU_1xA10 = "GPU_1xA10"
    GPU_1xH100 = "GPU_1xH100"
    GPU_8xH100 = "GPU_8xH100"
    GPU_8xB300 = "GPU_8xB300"
    CPU = "CPU"

    @classmethod
    def _missing_(cls, value: object) -> "AcceleratorType":
        if isinstance(value, str):
            key = value.strip().lower()
            for member in cls:
                if member.value.lower() == key:
                    return member
        raise GPUTypeError(
            f"unknown accelerator type {value!r}; expected one of {cls.values()} (case-insensitive), "
            'or "CPU" for CPU ranks'
        )

    @classmethod
    def values(cls) -> List[str]:
        """The GPU accelerator types, as the reference lists them (``CPU`` is not among them)."""
        return [member.value for member in cls if member is not cls.CPU]

    @property
    def gpu_type(self) -> Optional[GPUType]:
        """The GPU model of this shape (``GPUType.H100`` for ``GPU_8xH100``); ``None`` for ``CPU``."""
        return _SHAPES[self][0]

    @property
    def gpus_per_node(self) -> Optional[int]:
        """The number of GPUs a node of this shape has (8 for ``GPU_8xH100``); ``None`` for ``CPU``."""
        return _SHAPES[self][1]

    @classmethod
    def from_gpu_type(cls, gpu_type: GPUType, num_accelerators: Optional[int]) -> "AcceleratorType":
        """The shape a model runs in: H100 is ``GPU_1xH100`` for one GPU, else ``GPU_8xH100``."""
        if gpu_type is GPUType.H100:
            return cls.GPU_1xH100 if num_accelerators == 1 else cls.GPU_8xH100
        if gpu_type is GPUType.A10:
            return cls.GPU_1xA10
        return cls.GPU_8xB300


_SHAPES = {
    AcceleratorType.GPU_1xA10: (GPUType.A10, 1),
    AcceleratorType.GPU_1xH100: (GPUType.H100, 1),
    AcceleratorType.GPU_8xH100: (GPUType.H100, 8),
    AcceleratorType.GPU_8xB300: (GPUType.B300, 8),
    AcceleratorType.CPU: (None, None),
}


class DisplayGpuType(enum.Enum):
    """How a legacy GPU type is shown to people."""

    a10 = "A10"
    h100_80gb = "8xH100"
    b300 = "8xB300"


def get_gpus_per_node(gpu_type: Union[GPUType, str], gpus: Optional[int] = None) -> int:
    """GPUs per node for a model: H100 1 when ``gpus == 1`` else 8; A10 1; B300 8."""
    model = GPUType(gpu_type)
    if model is GPUType.H100:
        return 1 if gpus == 1 else 8
    return 1 if model is GPUType.A10 else 8


def get_display_gpu_type(gpu_type: Union[GPUType, str], gpus: Optional[int]) -> str:
    """``1xH100``/``8xH100``, ``A10`` or ``8xB300``."""
    model = GPUType(gpu_type)
    if model is GPUType.H100 and gpus == 1:
        return "1xH100"
    return DisplayGpuType[model.value].value


_MODEL_IN_NAME = re.compile(r"\b(H100|A10|B300)(?=G|-|\s|$)", re.IGNORECASE)


def parse_gpu_model(device_name: str) -> Optional[GPUType]:
    """The reference's model for a CUDA device name, or ``None`` for other models (H200, A100, L4...)."""
    match = _MODEL_IN_NAME.search(device_name)
    return GPUType[match.group(1).upper()] if match else None


def cpu_mode_from_environment() -> bool:
    """True when ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU`` asks for CPU ranks whatever the code says."""
    return os.environ.get(_variables.ACCELERATOR_TYPE, "").strip().upper() == CPU


def attached_gpu_count() -> int:
    """The number of CUDA devices this process may use, without initialising CUDA (``DATABRICKS_AIR_SIMULATE_GPUS``
    when it is set: a testing aid)."""
    from databricks.air._engine.gpu_leases import simulated_count

    simulated = simulated_count(os.environ)
    if simulated is not None:
        return simulated
    with _Nvml() as nvml:
        total = nvml.count() if nvml else None
    if total is None:
        total = _torch_device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return total if visible is None else _count_visible(visible, total)


def attached_gpu_name() -> Optional[str]:
    """The name of the first visible CUDA device (e.g. ``NVIDIA H100 80GB HBM3``), or ``None``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible is not None else "0"
    with _Nvml() as nvml:
        if nvml:
            return nvml.name(first)
    return None


def _count_visible(visible: str, total: int) -> int:
    # CUDA's rules: entries are indices or GPU-/MIG- UUIDs; parsing stops at the first invalid entry.
    count = 0
    seen = set()
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry:
            break
        if entry.startswith(("GPU-", "MIG-")):
            count += 1
            continue
        try:
            index = int(entry)
        except ValueError:
            break
        if index < 0 or index >= total or index in seen:
            break
        seen.add(index)
        count += 1
    return min(count, total)


class _Nvml:
    """NVML, opened for the duration of a ``with`` block; falsy where there is no NVIDIA driver."""

    def __enter__(self) -> Optional["_Nvml"]:
        try:
            self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            return None
        if self._lib.nvmlInit_v2() != 0:
            return None
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "_open", False):
            self._lib.nvmlShutdown()

    def count(self) -> Optional[int]:
        count = ctypes.c_uint(0)
        return int(count.value) if self._lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 else None

    def name(self, device: str) -> Optional[str]:
        handle = ctypes.c_void_p()
        if device.startswith(("GPU-", "MIG-")):
            found = self._lib.nvmlDeviceGetHandleByUUID(device.encode(), ctypes.byref(handle))
        elif device.isdigit():
            found = self._lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(int(device)), ctypes.byref(handle))
        else:
            return None
        if found != 0:
            return None
        buffer = ctypes.create_string_buffer(96)
        if self._lib.nvmlDeviceGetName(handle, buffer, ctypes.c_uint(len(buffer))) != 0:
            return None
        return buffer.value.decode(errors="replace")


def _torch_device_count() -> int:
    # Without NVML (e.g. ROCm builds), ask torch; its device_count() does not create a CUDA context.
    try:
        import torch
    except ImportError:
        return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.device_count())
