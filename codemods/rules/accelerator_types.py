"""The one table from old GPU model names to accelerator types, shared by strings (AM103) and ``GPUType.X``
(AM108), and the codes of what it cannot map (AM104 to AM107, reported by both).

It mirrors what the runtime does with a deprecated ``gpu_type`` (``AcceleratorType.from_gpu_type``), but only where
the answer is exact: an H100 shape depends on the count, so it is mapped only from a literal count of 1 or a
multiple of 8.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

NO_LITERAL_COUNT = "AM104"
NO_TYPE_FOR_COUNT = "AM105"
NOT_A_MODEL = "AM106"
COMPUTED = "AM107"
UNMAPPED_CODES: Dict[str, str] = {
    NO_LITERAL_COUNT: "reported: an H100 type whose count is not a literal (the shape depends on it)",
    NO_TYPE_FOR_COUNT: "reported: a literal count with no accelerator type for its model (e.g. 4 x H100)",
    NOT_A_MODEL: "reported: a GPU type string that is not an old model name as written",
    COMPUTED: "reported: a computed GPU type string",
}
"""What cannot be mapped exactly, each code with its line for ``--list-rules``."""

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


def unmappable(model: str, count: Optional[int], shown: str = "") -> Tuple[str, str]:
    """``(code, message)`` for an old model name (``shown`` as written) with no exact accelerator type at ``count``."""
    shown = shown or repr(model)
    if model not in OLD_MODELS:
        return NOT_A_MODEL, f"GPU type {shown} is not mapped automatically: use one of {list(NEW_TYPES)}"
    if count is None:
        return NO_LITERAL_COUNT, (f"{shown} maps to GPU_1xH100 or GPU_8xH100 depending on the count, which is not a "
                                  "literal here: write the accelerator type")
    return NO_TYPE_FOR_COUNT, f"{shown} with {count} GPUs has no accelerator type: write one by hand"
