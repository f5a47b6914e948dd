"""AM103: GPU type strings become accelerator types, exactly as the runtime would resolve them.

On ``distributed``/``ray_launch``/``with_overrides`` calls (:mod:`air_migrate.rules.targets`), the value of
``accelerator_type=`` (or the old ``gpu_type=``) when it is a string literal, per the table of
:mod:`air_migrate.rules.accelerator_types`: ``"A10"`` -> ``"GPU_1xA10"``, ``"B300"`` -> ``"GPU_8xB300"``, and
``"H100"`` -> ``"GPU_1xH100"`` for a literal count of 1 or ``"GPU_8xH100"`` for a literal multiple of 8. The quotes
and prefix of the literal are kept. What cannot be mapped exactly is left and reported with its own code (each
blocks the file):

* AM104: ``"H100"`` with a count that is not a literal (or no count), so the shape depends on it;
* AM105: ``"H100"`` with a literal count that has no accelerator type (e.g. 4);
* AM106: a string that is not one of the old model names as written (``"h100"``, ``"a10g"``, ``"h100_80gb"``);
* AM107: an f-string or other computed string.

``GPUType.X`` values are AM108's.

Safety: safe; the new value is the one the runtime itself derives from the old value and the count.
"""

from __future__ import annotations

from typing import Collection, Optional

import libcst
from libcst.metadata import PositionProvider, ScopeProvider

from air_migrate.rule_base import Rule, register
from air_migrate.rules.accelerator_types import COMPUTED, NEW_TYPES, UNMAPPED_CODES, accelerator_type_for, unmappable
from air_migrate.rules.targets import is_launch_call, launch_words, literal_count, type_arg


@register
class GpuTypesRule(Rule):
    CODE = "AM103"
    DESCRIPTION = (
        'GPU type strings ("H100"...) become accelerator types ("GPU_8xH100"...) where the count is known (safe)'
    )
    REPORTS = UNMAPPED_CODES
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider)

    def statement_words(self) -> Optional[Collection[str]]:
        return launch_words(self.context.text or self.module.code)

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.Call:
        if not is_launch_call(self.get_metadata, original_node, self.context.text or self.module.code):
            return updated_node
        found = type_arg(original_node)
        if found is None:
            return updated_node
        value = found.value
        if not isinstance(value, libcst.SimpleString):
            if isinstance(value, (libcst.FormattedString, libcst.ConcatenatedString)):
                self.report(value, "a computed GPU type string cannot be mapped: write the accelerator type",
                            blocking=True, code=COMPUTED)
            return updated_node
        text = value.evaluated_value
        if not isinstance(text, str) or text in NEW_TYPES or text.upper() == "CPU":
            return updated_node
        count = literal_count(original_node)
        target = accelerator_type_for(text, count)
        if target is None:
            code, message = unmappable(text, count)
            self.report(value, message, blocking=True, code=code)
            return updated_node
        quoted = value.value
        prefix_length = len(quoted) - len(quoted.lstrip("rRbBuU"))
        quote = quoted[prefix_length:prefix_length + 3]
        if quote not in ('"""', "'''"):
            quote = quote[0]
        new_value = libcst.SimpleString(f"{quoted[:prefix_length]}{quote}{target}{quote}")
        self.report(value, f"{text!r} -> {target!r}", after=new_value)
        args = [
            arg.with_changes(value=new_value) if original is found else arg
            for original, arg in zip(original_node.args, updated_node.args)
        ]
        return updated_node.with_changes(args=args)
