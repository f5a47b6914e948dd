"""The one table from old GPU model names to accelerator types, shared by strings and ``GPUType.X``.

It mirrors what the runtime does with a deprecated ``gpu_type`` (``AcceleratorType.from_gpu_type``), but only where
the answer is exact: an H100 shape depends on the count, so it is mapped only from a literal count of 1 or a
multiple of 8.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

OLD_MODELS: Tuple[str, ...] = ("A10", "H100", "B300")
"""The old model names, as ``GPUType`` members and as strings."""
NEW_TYPES: Tuple[str, ...] = ("GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300")
FIXED: Dict[str, str] = {"A10": "GPU_1xA10", "B300": "GPU_8xB300"}
"""Models with one shape whatever the count."""


def accelerator_type_for(model: str, count: Optional[int]) -> Optional[str]:
    """The accelerator type for an old model name and a literal count, or ``None`` when there is no exact one.

    >>> accelerator_type_for("H100", 8), accelerator_type_for("H100", 4), accelerator_type_for("A10", None)
    ('GPU_8xH100', None, 'GPU_1xA10')
    """
    if model in FIXED:
        return FIXED[model]
    if model == "H100" and count is not None:
        if count == 1:
            return "GPU_1xH100"
        if count > 0 and count % 8 == 0:
            return "GPU_8xH100"
    return None
