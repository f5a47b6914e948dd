"""AM102: the old keywords ``gpus=`` and ``gpu_type=`` become ``num_accelerators=`` and ``accelerator_type=``.

On ``distributed(...)`` and ``ray_launch(...)`` (as decorators or plain calls) of ``serverless_gpu`` or
``databricks.air``, resolved by scope whatever the import's alias, and on ``.with_overrides(...)``
(:mod:`air_migrate.rules.targets`). The value and its formatting are kept (GPU type values are AM103's and AM108's).
Calls where the rename cannot be confirmed are reported and left: both the old and the new keyword given, or
``**kwargs`` the tool cannot see into (both block the file: it would be half-migrated).

Safety: safe; ``databricks.air`` takes the new names with the same meaning.
"""

from __future__ import annotations

from typing import Collection, Optional

import libcst
from libcst.metadata import PositionProvider, ScopeProvider

from air_migrate.rules.base import Rule, register
from air_migrate.rules.targets import is_launch_call, launch_words

RENAMES = {"gpus": "num_accelerators", "gpu_type": "accelerator_type"}


@register
class KeywordsRule(Rule):
    CODE = "AM102"
    DESCRIPTION = "gpus= and gpu_type= become num_accelerators= and accelerator_type= on distributed/ray_launch (safe)"
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider)

    def statement_words(self) -> Optional[Collection[str]]:
        return launch_words(self.context.text or self.module.code)

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.Call:
        if not is_launch_call(self.get_metadata, original_node):
            return updated_node
        given = {arg.keyword.value for arg in original_node.args if arg.keyword is not None}
        old = [name for name in RENAMES if name in given]
        if not old:
            if any(arg.star == "**" for arg in original_node.args):
                self.report(original_node, "keywords passed through ** cannot be checked for gpus/gpu_type",
                            blocking=True)
            return updated_node
        clashes = [name for name in old if RENAMES[name] in given]
        if clashes:
            pairs = ", ".join(f"{name}= and {RENAMES[name]}=" for name in clashes)
            self.report(original_node, f"both {pairs} are given: keep one by hand", blocking=True)
            return updated_node
        args = []
        for original, arg in zip(original_node.args, updated_node.args):
            if original.keyword is not None and arg.keyword is not None and original.keyword.value in RENAMES:
                keyword = arg.keyword.with_changes(value=RENAMES[original.keyword.value])
                self.report(original.keyword, f"{original.keyword.value}= -> {keyword.value}=", after=keyword)
                arg = arg.with_changes(keyword=keyword)
            args.append(arg)
        return updated_node.with_changes(args=args)
