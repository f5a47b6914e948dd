"""AM101: ``serverless_gpu`` imports become ``databricks.air`` imports, aliases and positions kept.

* ``from serverless_gpu[.sub] import a, b as c`` -> ``from databricks.air[.sub] import a, b as c``;
* ``import serverless_gpu[.sub] [as x]`` -> ``import databricks.air[.sub] [as x]``; without an alias, the code's
  ``serverless_gpu.y`` becomes ``databricks.air.y`` (with an alias, ``x.y`` is left as written);
* the submodules are those ``databricks.air`` has under the same name (:data:`SUBMODULES`: ``launcher``, ``ray``,
  ``compute``...); ``serverless_gpu.api``, an old path seen in public code, exports the top-level names, so it
  becomes ``databricks.air`` itself (except in a plain ``import serverless_gpu.api``, whose uses would need
  rewriting: reported); any other submodule has no counterpart and is reported, with its uses left as written;
* an import that ``databricks.air`` already provides in this cell is removed rather than duplicated;
* ``from serverless_gpu import *`` is rewritten and reported, since the names it brings are not visible;
* imports under ``try``, or under an ``if`` that chooses between the two packages (a fallback:
  :mod:`~air_migrate.rules.guards`; any other ``if``, such as ``if __name__ == "__main__":``, is plain code and its
  imports are rewritten), ``importlib.import_module("serverless_gpu...")``, ``__import__`` and strings that are a
  module path into ``serverless_gpu`` (``"serverless_gpu.launcher.distributed"``, as ``mock.patch`` takes) are
  reported for a person, not rewritten (the ``serverless_gpu`` shim keeps them working); any other string that
  mentions it (a docstring, a log line, a message) is prose, and only noted (severity ``info``).

Names are resolved by scope: a local variable called ``serverless_gpu``, or ``torch.distributed``, is never touched.

Safety: every rewrite is safe (``databricks.air`` exports the very objects ``serverless_gpu`` does), except
``import *``, which is made and flagged ``review``: the names it brings cannot be checked.
"""

from __future__ import annotations

import re
from typing import Collection, Optional, Set, Tuple, Union

import libcst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import BaseAssignment, ImportAssignment, ParentNodeProvider, PositionProvider, ScopeProvider

from air_migrate.rule_base import CellContext, Rule, Severity, register
from air_migrate.rules.guards import is_guard

OLD = "serverless_gpu"
NEW = "databricks.air"
SUBMODULES = frozenset({"compute", "data", "exceptions", "launcher", "ray", "runtime", "utils"})
"""The modules of ``serverless_gpu`` that ``databricks.air`` has under the same name."""
TOP_LEVEL_ALIASES = frozenset({"api"})
"""Old submodules that hold the top-level names: they become ``databricks.air`` itself."""
_IMPORT_FUNCTIONS = {"importlib.import_module", "import_module", "__import__"}


def _is_old(dotted: Optional[str]) -> bool:
    return dotted == OLD or (dotted or "").startswith(OLD + ".")


def _renamed(dotted: Optional[str]) -> Optional[str]:
    """``serverless_gpu[.x]`` -> ``databricks.air[.x]``; ``None`` for any other module, or an old submodule that has
    no counterpart (:func:`_no_counterpart`)."""
    if not _is_old(dotted) or _no_counterpart(dotted):
        return None
    parts = dotted.split(".")  # type: ignore[union-attr]
    if len(parts) > 1 and parts[1] in TOP_LEVEL_ALIASES:
        return NEW
    return NEW + dotted[len(OLD) :]  # type: ignore[index]


def _no_counterpart(dotted: Optional[str]) -> Optional[str]:
    """Why the old module ``dotted`` has no ``databricks.air`` counterpart to import instead, if it has none."""
    parts = (dotted or "").split(".")
    if len(parts) < 2 or parts[1] in SUBMODULES or (parts[1] in TOP_LEVEL_ALIASES and len(parts) == 2):
        return None
    return (
        f"{dotted} has no counterpart in {NEW} (its modules are {', '.join(sorted(SUBMODULES))}), so it is left "
        f"as it is: import the names it gives from {NEW} or one of those modules"
    )


def _dotted(expression: str) -> Union[libcst.Attribute, libcst.Name]:
    node = libcst.parse_expression(expression)
    assert isinstance(node, (libcst.Attribute, libcst.Name))
    return node


@register
class ImportsRule(Rule):
    CODE = "AM101"
    DESCRIPTION = (
        "serverless_gpu imports become databricks.air imports, aliases kept (safe; import * flagged for review; "
        "guarded and dynamic imports reported)"
    )
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider, ParentNodeProvider)

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__(context)
        self._new_imports: Set[Tuple[str, Optional[str]]] = set()
        self._import_depth = 0
        self._reported_strings: Set[libcst.SimpleString] = set()
        self._top_level: Optional[Set[libcst.CSTNode]] = None

    # --- what the cell already imports from databricks.air -------------------------------------------------------

    def visit_Module(self, node: libcst.Module) -> None:
        for statement in node.body:
            if not isinstance(statement, libcst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, libcst.ImportFrom) and not small.relative and small.module is not None:
                    if get_full_name_for_node(small.module) == NEW and not isinstance(small.names, libcst.ImportStar):
                        for alias in small.names:
                            self._new_imports.add((get_full_name_for_node(alias.name) or "", _asname(alias)))

    def statement_words(self) -> Optional[Collection[str]]:
        return (OLD,)  # imports, uses of the module, strings: every one spells it out

    # --- imports -------------------------------------------------------------------------------------------------

    def visit_Import(self, node: libcst.Import) -> None:
        self._import_depth += 1

    def visit_ImportFrom(self, node: libcst.ImportFrom) -> None:
        self._import_depth += 1

    def leave_Import(
        self, original_node: libcst.Import, updated_node: libcst.Import
    ) -> Union[libcst.Import, libcst.RemovalSentinel]:
        self._import_depth -= 1
        dotted = [get_full_name_for_node(alias.name) for alias in original_node.names]
        if not any(_is_old(name) for name in dotted):
            return updated_node
        if self._guarded(original_node):
            self.report(
                original_node, f"a guarded import of {OLD} is left as it is: move it by hand", severity=Severity.MANUAL
            )
            return updated_node
        problem = self._left_as_written(original_node)
        if problem is not None:
            self.report(original_node, problem, severity=Severity.MANUAL)
            return updated_node
        targets = [_renamed(name) for name in dotted]
        names = []
        for alias, target in zip(updated_node.names, targets):
            names.append(alias.with_changes(name=_dotted(target)) if target else alias)
        new_node = updated_node.with_changes(names=names)
        renamed = [(get_full_name_for_node(a.name) or "", t) for a, t in zip(original_node.names, targets) if t]
        before = ", ".join(old for old, _ in renamed)
        after = ", ".join(target for _, target in renamed)
        self.report(original_node, f"import {before} -> import {after}", after=new_node)
        return new_node

    def leave_ImportFrom(
        self, original_node: libcst.ImportFrom, updated_node: libcst.ImportFrom
    ) -> Union[libcst.ImportFrom, libcst.RemovalSentinel]:
        self._import_depth -= 1
        if original_node.relative:
            return updated_node
        assert original_node.module is not None  # (only a relative import has no module)
        old = get_full_name_for_node(original_node.module)
        if not _is_old(old):
            return updated_node
        target = _renamed(old) or NEW
        if self._guarded(original_node):
            self.report(
                original_node,
                f"a guarded import from {old} is left as it is: move it by hand",
                severity=Severity.MANUAL,
            )
            return updated_node
        problem = self._left_as_written(original_node)
        if problem is not None:
            self.report(original_node, problem, severity=Severity.MANUAL)
            return updated_node
        if isinstance(original_node.names, libcst.ImportStar):
            new_node = updated_node.with_changes(module=_dotted(target))
            self.report(
                original_node,
                f"from {old} import * -> from {target} import *; list the names you use instead of *",
                severity=Severity.REVIEW,
                after=new_node,
            )
            return new_node
        wanted = {(get_full_name_for_node(a.name) or "", _asname(a)) for a in original_node.names}
        if target == NEW and wanted <= self._new_imports:
            self.report(
                original_node, f"from {old} import ... removed: {NEW} already provides these names here", after=""
            )
            return libcst.RemoveFromParent()
        new_node = updated_node.with_changes(module=_dotted(target))
        self.report(original_node, f"from {old} import -> from {target} import", after=new_node)
        return new_node

    # --- uses of an unaliased `import serverless_gpu` ------------------------------------------------------------

    def leave_Name(self, original_node: libcst.Name, updated_node: libcst.Name) -> Union[libcst.Name, libcst.Attribute]:
        if original_node.value != OLD or self._import_depth:
            return updated_node
        scope = self.get_metadata(ScopeProvider, original_node, None)
        if scope is None:
            return updated_node
        # `import serverless_gpu.data` binds the dotted name: look up the whole chain this name starts.
        chain: libcst.CSTNode = original_node
        for parent in reversed(self.ancestors[:-1]):
            if not isinstance(parent, libcst.Attribute) or parent.value is not chain:
                break
            chain = parent
        dotted = (get_full_name_for_node(chain) or OLD).split(".")
        bindings: Set[BaseAssignment] = set()
        while dotted and not bindings:  # the longest prefix that is bound: serverless_gpu.data, then serverless_gpu
            bindings = set(scope[".".join(dotted)])
            dotted.pop()
        if bindings and all(
            isinstance(binding, ImportAssignment)
            and isinstance(binding.node, libcst.Import)
            and not self._guarded(binding.node)
            and self._left_as_written(binding.node) is None
            for binding in bindings
        ):
            new_node = _dotted(NEW)
            self.report(original_node, f"{OLD} -> {NEW}", after=new_node)
            return new_node
        return updated_node

    # --- what is only reported -----------------------------------------------------------------------------------

    def visit_Call(self, node: libcst.Call) -> None:
        if get_full_name_for_node(node.func) not in _IMPORT_FUNCTIONS or not node.args:
            return
        first = node.args[0].value
        if isinstance(first, libcst.SimpleString) and OLD in first.value:
            self._reported_strings.add(first)
            self.report(
                node,
                f"a dynamic import of {first.value} is left as it is: import {NEW} instead",
                severity=Severity.MANUAL,
            )

    def visit_SimpleString(self, node: libcst.SimpleString) -> None:
        if OLD not in node.value or node in self._reported_strings:
            return
        if _MODULE_PATH.match(_string_text(node)):
            self.report(
                node,
                f"a string names the module path {node.value}, left as it is: if code imports or "
                f"patches by it (mock.patch, import_module), write {NEW} there",
                severity=Severity.MANUAL,
            )
        else:
            self.report(node, f"a string mentions {OLD} (prose, not code); it is left as it is", severity=Severity.INFO)

    def visit_FormattedString(self, node: libcst.FormattedString) -> None:
        if any(isinstance(part, libcst.FormattedStringText) and OLD in part.value for part in node.parts):
            self.report(node, f"a string mentions {OLD} (prose, not code); it is left as it is", severity=Severity.INFO)

    def _left_as_written(self, node: libcst.CSTNode) -> Optional[str]:
        """Why an (unguarded) import of ``serverless_gpu`` cannot be rewritten, if it cannot: a module with no
        counterpart, or a plain ``import serverless_gpu.api`` (its uses spell the module out)."""
        if isinstance(node, libcst.ImportFrom):
            module = get_full_name_for_node(node.module) if node.module is not None else None
            if module == OLD and not isinstance(node.names, libcst.ImportStar):
                for alias in node.names:
                    name = get_full_name_for_node(alias.name) or ""
                    if name in TOP_LEVEL_ALIASES:  # `from serverless_gpu import api`: a module databricks.air lacks
                        return _top_level_alias_problem(f"{OLD}.{name}", None)
            return _no_counterpart(module)
        if isinstance(node, libcst.Import):
            for alias in node.names:
                name = get_full_name_for_node(alias.name) or ""
                if _is_old(name):
                    found = _no_counterpart(name) or _top_level_alias_problem(name, alias.asname)
                    if found is not None:
                        return found
        return None

    def _guarded(self, node: libcst.CSTNode) -> bool:
        """Under ``try``, or an ``if`` that chooses between the packages (in its own function or class): the import
        may be a fallback the author wants to keep (:mod:`air_migrate.rules.guards`)."""
        if self._top_level is None:
            self._top_level = {
                small
                for statement in self.module.body
                if isinstance(statement, libcst.SimpleStatementLine)
                for small in statement.body
            }
        if node in self._top_level:
            return False  # a statement of the module's own (most imports): nothing around it (and no walk up)
        parent = self.get_metadata(ParentNodeProvider, node, None)
        while parent is not None and not isinstance(parent, (libcst.FunctionDef, libcst.ClassDef, libcst.Module)):
            if is_guard(parent, self.statement_code):
                return True
            parent = self.get_metadata(ParentNodeProvider, parent, None)
        return False


def _top_level_alias_problem(dotted: Optional[str], asname: Optional[libcst.AsName]) -> Optional[str]:
    """``import serverless_gpu.api`` (no alias) and ``from serverless_gpu import api``: the module is used by its
    name, which ``databricks.air`` does not have."""
    parts = (dotted or "").split(".")
    if len(parts) == 2 and parts[1] in TOP_LEVEL_ALIASES and asname is None:
        return (
            f"{dotted} is {NEW} itself under an old name, which {NEW} does not have, so this import and its uses "
            f"are left as they are: write `import {NEW} as {parts[1]}`, or import the names from {NEW}"
        )
    return None


_MODULE_PATH = re.compile(rf"^\s*{OLD}(\.[A-Za-z_][A-Za-z0-9_]*)*(:[A-Za-z_][A-Za-z0-9_.]*)?\s*$")
"""A string that is nothing but a dotted path into the old package (``"serverless_gpu.launcher.distributed"``,
``"serverless_gpu:distributed"``): code may import or patch by it. Any other mention is prose (a docstring, a log
line, a message), which only informs."""


def _string_text(node: libcst.SimpleString) -> str:
    """The string's characters between its quotes (prefix and quotes dropped, escapes left as written)."""
    quote = node.quote
    return node.value[len(node.prefix) + len(quote) : len(node.value) - len(quote)]


def _asname(alias: libcst.ImportAlias) -> Optional[str]:
    return get_full_name_for_node(alias.asname.name) if alias.asname else None
