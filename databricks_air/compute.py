"""Which accelerators a call runs on: the GPUs attached to this machine, or CPU ranks.

GPUs are counted through NVML (the library behind ``nvidia-smi``), honouring ``CUDA_VISIBLE_DEVICES``, so the
caller never initialises CUDA (which would reserve memory on a GPU and make the notebook process CUDA-bound).

CPU mode is our addition for laptops and CI: ``accelerator_type="CPU"`` or the environment variable
``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU`` runs ``num_accelerators`` CPU ranks (default 1) that use gloo.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

CPU = "CPU"
ACCELERATOR_TYPE_VARIABLE = "DATABRICKS_AIR_ACCELERATOR_TYPE"


def cpu_mode_requested(accelerator_type: object) -> bool:
    """True when the code or the environment asks for CPU ranks."""
    if os.environ.get(ACCELERATOR_TYPE_VARIABLE, "").strip().upper() == CPU:
        return True
    value = getattr(accelerator_type, "value", accelerator_type)
    return isinstance(value, str) and value.strip().upper() == CPU


def attached_gpu_count() -> int:
    """The number of CUDA devices this process may use, without initialising CUDA."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    total = _nvml_device_count()
    if total is None:
        total = _torch_device_count()
    if visible is None:
        return total
    return _count_visible(visible, total)


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


def _nvml_device_count() -> Optional[int]:
    """Devices NVML sees, or ``None`` when NVML is not there (no NVIDIA driver)."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if nvml.nvmlInit_v2() != 0:
            return None
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        return int(count.value)
    finally:
        try:
            nvml.nvmlShutdown()
        except AttributeError:
            pass


def _torch_device_count() -> int:
    # Without NVML (e.g. ROCm builds), ask torch; its device_count() does not create a CUDA context.
    try:
        import torch
    except ImportError:
        return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.device_count())
