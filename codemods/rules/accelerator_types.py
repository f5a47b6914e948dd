"""The one table from old GPU model names to accelerator types, shared by strings (AM103) and ``GPUType.X``
(AM108), and the codes of what it cannot map (AM104 to AM107, reported by both).

It mirrors what the runtime does with a deprecated ``gpu_type``: a string is read as the runtime reads it
(:func:`parse_model`: case-insensitive, surrounding spaces ignored, the values ``"h100_80gb"`` and ``"a10g"`` too), and
a model becomes the shape ``AcceleratorType.from_gpu_type`` gives, but only where the answer is exact: an H100 shape
depends on the count, so it is mapped only from a literal count of 1 or a multiple of 8.
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
    NOT_A_MODEL: "reported: a GPU type string that is neither an old model name nor an accelerator type",
    COMPUTED: "reported: a computed GPU type string",
}
"""What cannot be mapped exactly, each code with its line for ``--list-rules``."""

OLD_MODELS: Tuple[str, ...] = ("A10", "H100", "B300")
"""The old model names, as ``GPUType`` members and as strings."""
NEW_TYPES: Tuple[str, ...] = ("GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300")
FIXED: Dict[str, str] = {"A10": "GPU_1xA10", "B300": "GPU_8xB300"}
"""Models with one shape whatever the count."""
_SPELLINGS: Dict[str, str] = {"h100": "H100", "h100_80gb": "H100", "a10": "A10", "a10g": "A10", "b300": "B300"}
"""Every string the runtime's ``GPUType`` accepts (compared in lower case, stripped), and the model it means: the
members' names and values, and the ``a10g`` alias."""


def parse_model(text: str) -> Optional[str]:
    """The old model name (``"H100"``) a GPU type string means to the runtime, or ``None`` for no model.

    >>> parse_model(" h100 "), parse_model("A10G"), parse_model("h100_80gb"), parse_model("GPU_8xH100")
    ('H100', 'A10', 'H100', None)
    """
    return _SPELLINGS.get(text.strip().lower())


def is_accelerator_type(text: str) -> bool:
    """``text`` names an accelerator type (or ``CPU``) as the runtime reads it: case-insensitive, stripped."""
    key = text.strip().lower()
    return key == "cpu" or any(key == new.lower() for new in NEW_TYPES)


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
        return NO_LITERAL_COUNT, (
            f"{shown} maps to GPU_1xH100 or GPU_8xH100 depending on the count, which is not a "
            "literal here: write the accelerator type"
        )
    return NO_TYPE_FOR_COUNT, f"{shown} with {count} GPUs has no accelerator type: write one by hand"
