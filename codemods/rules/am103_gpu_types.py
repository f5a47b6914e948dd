"""AM103: GPU type strings become accelerator types, exactly as the runtime would resolve them.

On ``distributed``/``ray_launch``/``with_overrides`` calls (see AM102), the value of ``accelerator_type=`` (or the
old ``gpu_type=``) when it is a string literal: ``"A10"`` -> ``"GPU_1xA10"``, ``"B300"`` -> ``"GPU_8xB300"``, and
``"H100"`` -> ``"GPU_1xH100"`` for a literal count of 1 or ``"GPU_8xH100"`` for a literal multiple of 8. The quotes
and prefix of the literal are kept. What cannot be mapped exactly is reported with its own code and left:

* AM104: ``"H100"`` with a count that is not a literal (or no count), so the shape depends on it;
* AM105: ``"H100"`` with a literal count that has no accelerator type (e.g. 4);
* AM106: a string that is not one of the old model names as written (``"h100"``, ``"a10g"``, ``"h100_80gb"``);
* AM107: an f-string or other computed value;
* AM108: ``GPUType.X``, whose rewrite to ``AcceleratorType`` needs its import changed too (not automated yet).
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst
from libcst.metadata import PositionProvider, QualifiedNameProvider

from air_migrate.rules.am102_keywords import KeywordsRule
from air_migrate.rules.base import Rule, register

NEW_TYPES = ("GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300")
FIXED: Dict[str, str] = {"A10": "GPU_1xA10", "B300": "GPU_8xB300"}
_TYPE_KEYWORDS = ("accelerator_type", "gpu_type")
_COUNT_KEYWORDS = ("num_accelerators", "gpus")
_GPU_TYPE_CLASSES = {f"{module}.compute.GPUType" for module in ("serverless_gpu", "databricks.air")}


def accelerator_type_for(model: str, count: Optional[int]) -> Optional[str]:
    """The accelerator type for an old model name and a literal count, or ``None`` when there is no exact one."""
    if model in FIXED:
        return FIXED[model]
    if model == "H100" and count is not None:
        if count == 1:
            return "GPU_1xH100"
        if count > 0 and count % 8 == 0:
            return "GPU_8xH100"
    return None


@register
class GpuTypesRule(Rule):
    CODE = "AM103"
    DESCRIPTION = 'GPU type strings ("H100"...) become accelerator types ("GPU_8xH100"...) where the count is known'
    METADATA_DEPENDENCIES = (PositionProvider, QualifiedNameProvider)

    _is_target = KeywordsRule._is_target

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.Call:
        if not self._is_target(original_node):  # type: ignore[arg-type]
            return updated_node
        keywords = {arg.keyword.value: arg for arg in original_node.args if arg.keyword is not None}
        type_arg = next((keywords[k] for k in _TYPE_KEYWORDS if k in keywords), None)
        if type_arg is None:
            return updated_node
        value = type_arg.value
        if self._is_gpu_type_member(value):
            self.report(value, "GPUType.X is not rewritten yet: use AcceleratorType (see the message of the runtime's "
                        "FutureWarning for the exact value)", blocking=True, code="AM108")
            return updated_node
        if not isinstance(value, libcst.SimpleString):
            if isinstance(value, (libcst.FormattedString, libcst.ConcatenatedString)):
                self.report(value, "a computed GPU type string cannot be mapped: write the accelerator type",
                            blocking=True, code="AM107")
            return updated_node
        text = value.evaluated_value
        if text in NEW_TYPES or text.upper() == "CPU":
            return updated_node
        if text not in ("A10", "H100", "B300"):
            self.report(value, f"GPU type {text!r} is not mapped automatically: use one of {list(NEW_TYPES)}",
                        blocking=True, code="AM106")
            return updated_node
        count = self._literal_count(keywords)
        target = accelerator_type_for(text, count)
        if target is None:
            if count is None:
                self.report(value, f"{text!r} maps to GPU_1xH100 or GPU_8xH100 depending on the count, which is not "
                            "a literal here: write the accelerator type", blocking=True, code="AM104")
            else:
                self.report(value, f"{text!r} with {count} GPUs has no accelerator type: write one by hand",
                            blocking=True, code="AM105")
            return updated_node
        self.report(value, f"{text!r} -> {target!r}")
        quoted = value.value
        prefix_length = len(quoted) - len(quoted.lstrip("rRbBuU"))
        quote = quoted[prefix_length]
        new_value = libcst.SimpleString(f"{quoted[:prefix_length]}{quote}{target}{quote}")
        args = [
            arg.with_changes(value=new_value) if original is type_arg else arg
            for original, arg in zip(original_node.args, updated_node.args)
        ]
        return updated_node.with_changes(args=args)

    def _literal_count(self, keywords: Dict[str, libcst.Arg]) -> Optional[int]:
        arg = next((keywords[k] for k in _COUNT_KEYWORDS if k in keywords), None)
        if arg is not None and isinstance(arg.value, libcst.Integer):
            return int(arg.value.evaluated_value)
        return None

    def _is_gpu_type_member(self, node: libcst.BaseExpression) -> bool:
        if not isinstance(node, libcst.Attribute):
            return False
        names = self.get_metadata(QualifiedNameProvider, node.value, set())
        return any(name.name in _GPU_TYPE_CLASSES for name in names)
