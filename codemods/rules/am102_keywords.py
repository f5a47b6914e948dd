"""AM102: the old keywords ``gpus=`` and ``gpu_type=`` become ``num_accelerators=`` and ``accelerator_type=``.

On ``distributed(...)`` and ``ray_launch(...)`` (as decorators or plain calls) of ``serverless_gpu`` or
``databricks.air``, or of the submodules that define them (``serverless_gpu.launcher``, ``serverless_gpu.ray``),
resolved by scope whatever the import form or alias, and on ``.with_overrides(...)``
(:mod:`air_migrate.rules.targets`). The value and its formatting are kept (GPU type values are AM103's and AM108's).
Calls where the rename cannot be confirmed are reported and left: both the old and the new keyword given, or
``**kwargs`` the tool cannot see into (both block the file: it would be half-migrated). So is a call through a plain
alias (``run_on = distributed``, then ``@run_on(gpus=8)``), which scope analysis does not follow, and any other call
of something imported from either package that is given ``gpus=`` or ``gpu_type=`` (whatever it is, the tool does
not know what it takes), so that ``--check`` never passes a file where an old keyword is left.

Safety: safe; ``databricks.air`` takes the new names with the same meaning.
"""

from __future__ import annotations

from typing import Collection, Dict, Optional, Tuple

import libcst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import PositionProvider, ScopeProvider

from air_migrate.rule_base import CellContext, Rule, Severity, register
from air_migrate.rules.targets import LAUNCHERS, is_launch_call, launch_words, package_callee, qualified_names

RENAMES = {"gpus": "num_accelerators", "gpu_type": "accelerator_type"}


@register
class KeywordsRule(Rule):
    CODE = "AM102"
    DESCRIPTION = "gpus= and gpu_type= become num_accelerators= and accelerator_type= on distributed/ray_launch (safe)"
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider)

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__(context)
        self._aliases: Dict[str, str] = {}
        """``run_on = distributed`` in this cell: alias -> what it names."""

    def visit_Assign(self, node: libcst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, libcst.Name) and isinstance(node.value, (libcst.Name, libcst.Attribute)):
            if any(name.name in LAUNCHERS for name in qualified_names(self.get_metadata, node.value)):
                self._aliases[target.value] = get_full_name_for_node(node.value) or "distributed"

    def statement_words(self) -> Optional[Collection[str]]:
        return launch_words(self.context.text or self.module.code)

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.Call:
        if not is_launch_call(self.get_metadata, original_node, self.context.text or self.module.code):
            alias = self._alias_called(original_node)
            if alias is not None and any(
                (arg.keyword is not None and arg.keyword.value in RENAMES) or arg.star for arg in original_node.args
            ):
                self.report(
                    original_node,
                    f"{alias[0]} is an alias of {alias[1]}: its keywords are not rewritten "
                    f"here; call {alias[1]}(...) directly, or rename them by hand",
                    severity=Severity.BLOCKING,
                )
                return updated_node
            keywords = [
                arg.keyword for arg in original_node.args if arg.keyword is not None and arg.keyword.value in RENAMES
            ]
            callee = package_callee(self.get_metadata, original_node) if keywords else None
            if callee is not None:
                self.report(
                    keywords[0],
                    f"{keywords[0].value}= is given to {callee}, which is not distributed or ray_launch, so "
                    "it is left as it is: check what that function takes (num_accelerators=, "
                    "accelerator_type=?)",
                    severity=Severity.MANUAL,
                )
            return updated_node
        given = {arg.keyword.value for arg in original_node.args if arg.keyword is not None}
        old = [name for name in RENAMES if name in given]
        if not old:
            if any(arg.star == "**" for arg in original_node.args):
                self.report(
                    original_node,
                    "keywords passed through ** cannot be checked for gpus/gpu_type",
                    severity=Severity.BLOCKING,
                )
            return updated_node
        clashes = [name for name in old if RENAMES[name] in given]
        if clashes:
            pairs = ", ".join(f"{name}= and {RENAMES[name]}=" for name in clashes)
            self.report(original_node, f"both {pairs} are given: keep one by hand", severity=Severity.BLOCKING)
            return updated_node
        args = []
        for original, arg in zip(original_node.args, updated_node.args):
            if original.keyword is not None and arg.keyword is not None and original.keyword.value in RENAMES:
                keyword = arg.keyword.with_changes(value=RENAMES[original.keyword.value])
                self.report(original.keyword, f"{original.keyword.value}= -> {keyword.value}=", after=keyword)
                arg = arg.with_changes(keyword=keyword)
            args.append(arg)
        return updated_node.with_changes(args=args)

    def _alias_called(self, call: libcst.Call) -> Optional[Tuple[str, str]]:
        """``(alias, launcher)`` when ``call`` calls a name this cell bound to a launcher by plain assignment."""
        if isinstance(call.func, libcst.Name) and call.func.value in self._aliases:
            return call.func.value, self._aliases[call.func.value]
        return None
