"""AM108: ``GPUType.X`` becomes ``AcceleratorType.Y``, with its import adjusted.

As the value of ``accelerator_type=`` (or the old ``gpu_type=``) on a ``distributed``/``ray_launch``/
``with_overrides`` call (:mod:`air_migrate.rules.targets`), ``GPUType.X`` of ``serverless_gpu.compute`` or
``databricks.air.compute`` (resolved by scope, through any import form or alias) maps by the same table as the
strings (:mod:`air_migrate.rules.accelerator_types`; H100 by the count, a literal or a name bound once to
one, :mod:`air_migrate.rules.bound_names`):

* a name bound by ``from serverless_gpu.compute import GPUType [as T]``: ``T.H100`` -> ``AcceleratorType.GPU_8xH100``;
  that import gains ``AcceleratorType`` right after ``GPUType`` in the same statement (so in the same cell: never a
  new import at the top of the module, nor above a ``%pip``/``restartPython()`` cell), and ``GPUType`` leaves it
  only when no other use of it remains anywhere in the file or notebook (every cell, magics included);
* a module attribute: ``sg.compute.GPUType.H100`` -> ``sg.compute.AcceleratorType.GPU_8xH100``, no import change.

Left as written and reported: what has no exact type (AM104 and AM105, the count; AM106, not a member such as
``GPUType.h100``), which blocks the file; and, without blocking (``GPUType`` still works, deprecated), a member
used anywhere else, a name bound by a guarded import or bound twice, and a cell where ``AcceleratorType`` already
names something else.

Safety: safe; the new value is the one the runtime derives from the old one and the count. Taking ``GPUType`` out
of a plain module's import is flagged ``review``: another module might import it from there.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Tuple, cast

import libcst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    ImportAssignment,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from air_migrate.rule_base import CellContext, FileScan, Rule, Severity, register
from air_migrate.rules import bound_names
from air_migrate.rules.accelerator_types import OLD_MODELS, accelerator_type_for, unmappable
from air_migrate.rules.guards import is_guard
from air_migrate.rules.targets import (
    launch_words,
    NEW_MODULE,
    OLD_MODULE,
    TYPE_KEYWORDS,
    is_launch_call,
    literal_count,
    qualified_names,
)
from air_migrate.sources import SourceFile

OLD_CLASS = "GPUType"
NEW_CLASS = "AcceleratorType"
COMPUTE_MODULES = (f"{OLD_MODULE}.compute", f"{NEW_MODULE}.compute")
OLD_CLASSES = frozenset(f"{module}.{OLD_CLASS}" for module in COMPUTE_MODULES)
NEW_CLASSES = frozenset(f"{module}.{NEW_CLASS}" for module in COMPUTE_MODULES)
_PLAN = "am108_bindings"
_ALIAS = re.compile(rf"\b{OLD_CLASS}\s+as\s+(\w+)")


@dataclasses.dataclass
class _Binding:
    """One ``GPUType`` import of the file, and what its uses across every cell need of it."""

    name: str
    """The name it binds (``GPUType`` or its alias)."""
    rewritten: int = 0
    remaining: int = 0
    needs_import: bool = False
    """Some rewritten use has no ``AcceleratorType`` in scope yet."""


@dataclasses.dataclass(frozen=True)
class _Note:
    code: str
    message: str
    severity: Severity


@register
class GpuTypeMembersRule(Rule):
    CODE = "AM108"
    DESCRIPTION = "GPUType.X becomes AcceleratorType.Y (the table of the strings), its import adjusted (safe)"
    METADATA_DEPENDENCIES = (PositionProvider, ParentNodeProvider, ScopeProvider)

    @classmethod
    def scan_file(cls, source: SourceFile) -> Optional[FileScan]:
        return bound_names.scan_bound_names(source)  # counts given by name: `gpus=NUM_GPUS`

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__(context)
        self._rewrites: Dict[libcst.Attribute, str] = {}
        """Member access -> the new member, for this cell."""
        self._notes: Dict[libcst.Attribute, _Note] = {}
        self._parents: Dict[libcst.CSTNode, libcst.CSTNode] = {}
        """The parent of every node of the statements that spell GPUType or an alias (from the survey): what
        ``ParentNodeProvider`` gives, without walking the whole cell."""

    # --- before any cell changes: every use, and what each import must become ----------------------------------

    def survey(self, module: libcst.Module) -> None:
        plan: Dict[Tuple[int, int], _Binding] = self.context.file.setdefault(_PLAN, {})
        text = self.context.text or module.code
        if OLD_CLASS not in text:
            return  # no GPUType here, nor any import of it (an alias is imported under its own name)
        # Every use of GPUType spells it or an alias of it: only the statements that do can hold one. A cell none
        # of whose own statements does has nothing to survey (the cell of an import in its prefix surveys that).
        names = {OLD_CLASS, *_ALIAS.findall(text)}
        holding = [s for s in module.body if any(name in self.statement_code(s) for name in names)]
        if not set(holding) - set(module.body[: len(self.context.prefix)]):
            return
        self._parents = _parents_within(module, holding)
        for origin, assignment in self._gpu_type_imports():
            binding = plan.setdefault(origin, _Binding(assignment.name))
            for access in assignment.references:
                self._survey_name(access.node, assignment, binding)
        for node in self._parents:
            if isinstance(node, libcst.Attribute) and node.attr.value == OLD_CLASS and self._is_old_class(node):
                member = self._member_access(node)
                if member is not None:
                    self._decide(member, module_attribute=True)

    def _gpu_type_imports(self) -> Iterable[Tuple[Tuple[int, int], ImportAssignment]]:
        scopes = {cast(Scope, scope) for scope in self.metadata[ScopeProvider].values() if scope is not None}
        for scope in scopes:
            for assignment in scope.assignments:
                if not isinstance(assignment, ImportAssignment) or not isinstance(assignment.node, libcst.ImportFrom):
                    continue
                node = assignment.node
                if node.relative or isinstance(node.names, libcst.ImportStar):
                    continue
                module = get_full_name_for_node(node.module) if node.module is not None else None
                if module not in COMPUTE_MODULES:
                    continue
                if any(
                    _bound_name(alias) == assignment.name and _imported_name(alias) == OLD_CLASS for alias in node.names
                ):
                    line = self.get_metadata(PositionProvider, node).start.line
                    yield self.context.origin(line), assignment

    def _survey_name(self, node: libcst.CSTNode, assignment: ImportAssignment, binding: _Binding) -> None:
        member = self._member_access(node) if isinstance(node, libcst.Name) else None
        if member is None:
            binding.remaining += 1  # GPUType itself (a call, an isinstance...): still used
            return
        obstacle = self._obstacle(node, assignment)
        if obstacle is not None:
            binding.remaining += 1
            self._notes[member] = _Note(self.CODE, obstacle, Severity.MANUAL)
            return
        if self._decide(member, module_attribute=False):
            binding.rewritten += 1
            binding.needs_import |= self._needs_import(node)
        else:
            binding.remaining += 1

    def _decide(self, member: libcst.Attribute, module_attribute: bool) -> bool:
        """Record what becomes of ``GPUType.X``; True when it is rewritten."""
        shown = self.module.code_for_node(member)
        call = self._launch_call_with_type(member)
        if call is None:
            if member.attr.value not in OLD_MODELS:
                return False  # GPUType.values() and the like: nothing to say
            self._notes[member] = _Note(
                self.CODE,
                f"{shown} is used outside a distributed call and is left as it is ({OLD_CLASS} is "
                f"deprecated: use {NEW_CLASS} where a shape is meant)",
                Severity.MANUAL,
            )
            return False
        count = literal_count(call, lambda name: bound_names.int_value(self, name))
        model = member.attr.value
        target = accelerator_type_for(model, count) if model in OLD_MODELS else None
        if target is None:
            code, message = unmappable(model, count, shown)
            self._notes[member] = _Note(code, message, Severity.BLOCKING)
            return False
        self._rewrites[member] = target
        return True

    def _launch_call_with_type(self, member: libcst.Attribute) -> Optional[libcst.Call]:
        arg = self._parent(member)
        if not isinstance(arg, libcst.Arg) or arg.value is not member or arg.keyword is None:
            return None
        if arg.keyword.value not in TYPE_KEYWORDS:
            return None
        call = self._parent(arg)
        if isinstance(call, libcst.Call) and is_launch_call(
            self.get_metadata, call, self.context.text or self.module.code
        ):
            return call
        return None

    def _obstacle(self, name: libcst.CSTNode, assignment: ImportAssignment) -> Optional[str]:
        """Why a use through an imported name cannot be rewritten, if it cannot."""
        scope = self.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return "this GPUType cannot be resolved: write the AcceleratorType by hand"
        if len(scope[assignment.name]) > 1:
            return f"{assignment.name} is bound more than once here, so it is left as it is: use {NEW_CLASS}"
        if self._guarded(assignment.node):
            return f"{assignment.name} comes from a guarded import, so it is left as it is: use {NEW_CLASS}"
        if NEW_CLASS in scope and not self._is_new_class_everywhere(scope[NEW_CLASS]):
            return f"{NEW_CLASS} already names something else here, so {OLD_CLASS} is left as it is"
        return None

    def _needs_import(self, name: libcst.CSTNode) -> bool:
        scope = self.get_metadata(ScopeProvider, name, None)
        return scope is None or NEW_CLASS not in scope

    def _is_new_class_everywhere(self, assignments: Iterable[object]) -> bool:
        for assignment in assignments:
            node = assignment.node if isinstance(assignment, ImportAssignment) else None
            if not isinstance(node, libcst.ImportFrom) or node.module is None:
                return False
            if isinstance(node.names, libcst.ImportStar):
                return False
            names = {
                f"{get_full_name_for_node(node.module)}.{_imported_name(alias)}"
                for alias in node.names
                if _bound_name(alias) == NEW_CLASS
            }
            if not names or not names <= NEW_CLASSES:
                return False
        return True

    def statement_words(self) -> Optional[Collection[str]]:
        # AcceleratorType too: where the new name is already bound, a use is left as it is.
        return launch_words(self.context.text or self.module.code) | {NEW_CLASS}

    # --- the transformation --------------------------------------------------------------------------------------

    def leave_Attribute(self, original_node: libcst.Attribute, updated_node: libcst.Attribute) -> libcst.Attribute:
        note = self._notes.get(original_node)
        if note is not None:
            self.report(original_node, note.message, severity=note.severity, code=note.code)
            return updated_node
        target = self._rewrites.get(original_node)
        if target is None:
            return updated_node
        if isinstance(updated_node.value, libcst.Attribute):  # sg.compute.GPUType.X: the module stays
            value: libcst.BaseExpression = updated_node.value.with_changes(attr=libcst.Name(NEW_CLASS))
        else:
            value = libcst.Name(NEW_CLASS)
        new_node = updated_node.with_changes(value=value, attr=libcst.Name(target))
        self.report(
            original_node,
            f"{self.module.code_for_node(original_node)} -> {self.module.code_for_node(new_node)}",
            after=new_node,
        )
        return new_node

    def leave_ImportFrom(self, original_node: libcst.ImportFrom, updated_node: libcst.ImportFrom) -> libcst.ImportFrom:
        plan: Dict[Tuple[int, int], _Binding] = self.context.file.get(_PLAN, {})
        line = self.get_metadata(PositionProvider, original_node).start.line
        binding = plan.get(self.context.origin(line))
        if binding is None or not binding.rewritten or isinstance(updated_node.names, libcst.ImportStar):
            return updated_node
        names = list(updated_node.names)
        index = next((i for i, alias in enumerate(names) if _bound_name(alias) == binding.name), None)
        if index is None:
            return updated_node
        still_used = binding.remaining > 0 or self._mentioned_elsewhere(binding.name)
        has_new = any(_bound_name(alias) == NEW_CLASS for alias in names)
        if still_used:
            if has_new or not binding.needs_import:
                return updated_node
            names[index : index + 1] = _insert_after(names[index], libcst.ImportAlias(libcst.Name(NEW_CLASS)))
            message = f"{NEW_CLASS} imported next to {OLD_CLASS}, which is still used"
            review = False
        elif has_new or not binding.needs_import:
            if len(names) == 1:
                return updated_node  # taking the whole statement out could take comments with it: leave it
            names = _without(names, index)
            message = f"{OLD_CLASS} removed from the import: no use of it is left"
            review = self._is_plain_module_level(original_node)
        else:
            names[index] = names[index].with_changes(name=libcst.Name(NEW_CLASS), asname=None)
            message = f"{OLD_CLASS} -> {NEW_CLASS} in the import: no use of {OLD_CLASS} is left"
            review = self._is_plain_module_level(original_node)
        if review:
            message += " (check that no other module imports it from here)"
        new_node = updated_node.with_changes(names=names)
        self.report(original_node, message, severity=Severity.REVIEW if review else Severity.CHANGE, after=new_node)
        return new_node

    # --- helpers -------------------------------------------------------------------------------------------------

    def _parent(self, node: libcst.CSTNode) -> Optional[libcst.CSTNode]:
        found = self._parents.get(node)
        return found if found is not None else self.get_metadata(ParentNodeProvider, node, None)

    def _is_old_class(self, node: libcst.CSTNode) -> bool:
        names = qualified_names(self.get_metadata, node)
        return bool(names) and all(name.name in OLD_CLASSES for name in names)

    def _member_access(self, node: libcst.CSTNode) -> Optional[libcst.Attribute]:
        """``node.X`` when ``node`` (a ``GPUType`` reference) is the value of an attribute access."""
        parent = self._parent(node)
        if isinstance(parent, libcst.Attribute) and parent.value is node:
            return parent
        return None

    def _guarded(self, node: libcst.CSTNode) -> bool:
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, (libcst.FunctionDef, libcst.ClassDef, libcst.Module)):
            if is_guard(parent, self.statement_code):
                return True
            parent = self._parent(parent)
        return False

    def _mentioned_elsewhere(self, name: str) -> bool:
        """The name appears in text no rule parsed (a skipped cell, a magic): count it as a use."""
        word = re.compile(rf"\b{re.escape(name)}\b")
        return any(word.search(text) for text in self.context.unparsed)

    def _is_plain_module_level(self, node: libcst.ImportFrom) -> bool:
        statement = self._parent(node)
        return (
            self.context.kind == "python"
            and statement is not None
            and isinstance(self._parent(statement), libcst.Module)
        )


def _imported_name(alias: libcst.ImportAlias) -> str:
    return get_full_name_for_node(alias.name) or ""


def _bound_name(alias: libcst.ImportAlias) -> str:
    if alias.asname is not None:
        return get_full_name_for_node(alias.asname.name) or ""
    return _imported_name(alias)


def _insert_after(alias: libcst.ImportAlias, new: libcst.ImportAlias) -> List[libcst.ImportAlias]:
    """``alias`` then ``new`` on the same line; ``new`` takes over ``alias``'s comma (and what follows it)."""
    comma = libcst.Comma(whitespace_after=libcst.SimpleWhitespace(" "))
    return [alias.with_changes(comma=comma), new.with_changes(comma=alias.comma)]


def _without(names: List[libcst.ImportAlias], index: int) -> List[libcst.ImportAlias]:
    """``names`` less one, the last remaining name taking the removed one's comma when it was last."""
    kept = names[:index] + names[index + 1 :]
    if index == len(names) - 1:
        kept[-1] = kept[-1].with_changes(comma=names[index].comma)
    return kept


class _ParentsOf(libcst.CSTVisitor):
    def __init__(self, module: libcst.Module) -> None:
        super().__init__()
        self.parents: Dict[libcst.CSTNode, libcst.CSTNode] = {}
        self._stack: List[libcst.CSTNode] = [module]

    def on_visit(self, node: libcst.CSTNode) -> bool:
        self.parents[node] = self._stack[-1]
        self._stack.append(node)
        return True

    def on_leave(self, original_node: libcst.CSTNode) -> None:
        self._stack.pop()


def _parents_within(
    module: libcst.Module, statements: Sequence[libcst.BaseStatement]
) -> Dict[libcst.CSTNode, libcst.CSTNode]:
    """The parent of every node of ``statements`` (top-level statements of ``module``, whose parent it is)."""
    visitor = _ParentsOf(module)
    for statement in statements:
        statement.visit(visitor)
    return visitor.parents
