"""AM103: GPU type strings become accelerator types, exactly as the runtime would resolve them.

On ``distributed``/``ray_launch``/``with_overrides`` calls (:mod:`air_migrate.rules.targets`), the value of
``accelerator_type=`` (or the old ``gpu_type=``) when it is a string literal, read as the runtime reads it
(case-insensitive, ``"a10g"`` and ``"h100_80gb"`` too) and mapped by the table of
:mod:`air_migrate.rules.accelerator_types`: ``"A10"``/``"a10"`` -> ``"GPU_1xA10"``, ``"B300"`` -> ``"GPU_8xB300"``,
and ``"H100"`` -> ``"GPU_1xH100"`` for a count of 1 or ``"GPU_8xH100"`` for a multiple of 8 (the count a literal,
or a name bound once to one: :mod:`air_migrate.rules.bound_names`). The quotes and prefix of the literal are kept.

The value may also be a name bound to a string literal in the same file (``GPU_TYPE = "H100"`` at module level, or
in an earlier cell of a notebook): that literal is rewritten when every use of the name, in every cell, is the type
of such a call and all of them need the same accelerator type. Otherwise the name is left as it is and each call is
reported (``AM109``, never silently: the runtime warns about an old model name), saying what to write there.

What cannot be mapped exactly is left and reported with its own code (each blocks the file):

* AM104: ``"H100"`` with a count that is not a literal (or no count), so the shape depends on it;
* AM105: ``"H100"`` with a literal count that has no accelerator type (e.g. 4);
* AM106: a string that is neither an old model name nor an accelerator type (``"h200"``, ``"A100"``);
* AM107: an f-string or other computed string.

And, without blocking, ``AM109``: a name the type cannot be followed through (bound more than once, imported,
computed, also used for something else), or any other expression given to the old ``gpu_type=``.

``GPUType.X`` values are AM108's.

Safety: safe; the new value is the one the runtime itself derives from the old value and the count. Rewriting a
name's literal in a plain module is flagged ``review``: another module might import that name.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection, Dict, List, Optional, Sequence, Tuple, cast

import libcst
from libcst.metadata import ParentNodeProvider, PositionProvider, Scope, ScopeProvider

from air_migrate.rule_base import FileScan, Rule, Severity, register
from air_migrate.rules import bound_names
from air_migrate.rules.accelerator_types import (
    COMPUTED,
    UNMAPPED_CODES,
    accelerator_type_for,
    is_accelerator_type,
    parse_model,
    unmappable,
)
from air_migrate.rules.targets import (
    COUNT_KEYWORDS,
    TYPE_KEYWORDS,
    is_launch_call,
    launch_words,
    literal_count,
    qualified_names,
    type_arg,
)
from air_migrate.sources import SourceFile

NOT_FOLLOWED = "AM109"
_OLD_KEYWORD = "gpu_type"
_TYPE_CLASSES = frozenset(
    f"{package}.compute.{name}"
    for package in ("serverless_gpu", "databricks.air")
    for name in ("GPUType", "AcceleratorType")
)
_TYPE_NAMES = "am103_type_names"


@dataclasses.dataclass(frozen=True)
class _Use:
    """A read of a module-level name that some call takes as its GPU type."""

    node: libcst.Name
    where: bound_names.Where
    role: str
    """``type`` (the value of a type keyword of a launch call), ``count``, or ``other``."""
    keyword: str = ""
    count: Optional[int] = None
    """For a type: the call's count, when it is known."""


@dataclasses.dataclass(frozen=True)
class _Note:
    code: str
    message: str
    severity: Severity = Severity.MANUAL


@dataclasses.dataclass
class _TypeNames:
    """The whole file's names given to a type keyword: their literals and uses, then what becomes of them."""

    literals: Dict[Tuple[str, bound_names.Where], libcst.SimpleString] = dataclasses.field(default_factory=dict)
    uses: Dict[str, List[_Use]] = dataclasses.field(default_factory=dict)
    rewrites: Optional[Dict[libcst.SimpleString, Tuple[str, str, Severity]]] = None
    """Literal -> (new value, message, severity: ``change``, or ``review``); decided once every cell is surveyed."""
    notes: Dict[libcst.Name, _Note] = dataclasses.field(default_factory=dict)


@register
class GpuTypesRule(Rule):
    CODE = "AM103"
    DESCRIPTION = (
        'GPU type strings ("H100", "a10"...), or a name bound to one, become accelerator types ("GPU_8xH100"...) '
        "where the count is known (safe; a name's string in a plain module flagged for review)"
    )
    REPORTS = {
        **UNMAPPED_CODES,
        NOT_FOLLOWED: "reported: a GPU type given through a name or expression air-migrate cannot follow (or a name "
        "also used for something else); left as it is",
    }
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider, ParentNodeProvider)

    @classmethod
    def scan_file(cls, source: SourceFile) -> Optional[FileScan]:
        return bound_names.scan_bound_names(source)

    def statement_words(self) -> Optional[Collection[str]]:
        # The names given to a type keyword too: their bindings and their other uses must be seen.
        return launch_words(self.context.text or self.module.code) | bound_names.words(self.context)

    # --- before any cell changes: every binding and use of the names given to a type keyword --------------------

    def survey(self, module: libcst.Module) -> None:
        facts = bound_names.facts(self.context)
        if facts is None or not facts.pattern.search(self.context.text or module.code):
            return
        state: _TypeNames = self.context.file.setdefault(_TYPE_NAMES, _TypeNames())
        for statement in module.body[len(self.context.prefix) :]:
            if isinstance(statement, libcst.SimpleStatementLine):
                for small in statement.body:
                    name, value = _plain_assignment(small)
                    if name in facts.bindings and isinstance(value, libcst.SimpleString):
                        state.literals[(name, bound_names.where(self, small))] = value
        skip = self.context.prefix_lines
        for scope in {cast(Scope, scope) for scope in self.metadata[ScopeProvider].values() if scope is not None}:
            for access in scope.accesses:
                node = access.node
                if not isinstance(node, libcst.Name) or node.value not in facts.bindings:
                    continue
                if self.get_metadata(PositionProvider, node).start.line <= skip:
                    continue  # the earlier cells' imports
                if bound_names.is_module_level(self, node):
                    state.uses.setdefault(node.value, []).append(self._use(node))

    def _use(self, node: libcst.Name) -> _Use:
        where = bound_names.where(self, node)
        arg = self.get_metadata(ParentNodeProvider, node, None)
        if isinstance(arg, libcst.Arg) and arg.value is node and arg.keyword is not None:
            call = self.get_metadata(ParentNodeProvider, arg, None)
            if isinstance(call, libcst.Call) and self._is_launch_call(call):
                if arg.keyword.value in TYPE_KEYWORDS:
                    return _Use(node, where, "type", arg.keyword.value, self._count(call))
                if arg.keyword.value in COUNT_KEYWORDS:
                    return _Use(node, where, "count")
        return _Use(node, where, "other")

    def visit_Module(self, node: libcst.Module) -> None:
        state = self.context.file.get(_TYPE_NAMES)
        if isinstance(state, _TypeNames) and state.rewrites is None:
            _decide(
                state,
                self.context.kind,
                lambda name: bound_names.mentioned_unread(self.context, name),
                bound_names.facts(self.context),
            )

    # --- the transformation --------------------------------------------------------------------------------------

    def leave_SimpleString(
        self, original_node: libcst.SimpleString, updated_node: libcst.SimpleString
    ) -> libcst.SimpleString:
        state = self.context.file.get(_TYPE_NAMES)
        rewrite = state.rewrites.get(original_node) if isinstance(state, _TypeNames) and state.rewrites else None
        if rewrite is None:
            return updated_node
        target, message, severity = rewrite
        new_value = _requoted(updated_node, target)
        self.report(original_node, message, severity=severity, after=new_value)
        return new_value

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.Call:
        if not self._is_launch_call(original_node):
            return updated_node
        found = type_arg(original_node)
        if found is None:
            return updated_node
        value = found.value
        if isinstance(value, libcst.Name):
            self._report_name(value, found)
            return updated_node
        if not isinstance(value, libcst.SimpleString):
            if isinstance(value, (libcst.FormattedString, libcst.ConcatenatedString)):
                self.report(
                    value,
                    "a computed GPU type string cannot be mapped: write the accelerator type",
                    severity=Severity.BLOCKING,
                    code=COMPUTED,
                )
            elif _is_old_keyword(found) and not self._is_type_member(value):
                self.report(
                    value,
                    f"gpu_type={self.module.code_for_node(value)} is not a literal, so air-migrate "
                    "cannot tell whether it is an old GPU model name (which the runtime warns about): make "
                    "sure its value is an accelerator type such as 'GPU_8xH100'",
                    severity=Severity.MANUAL,
                    code=NOT_FOLLOWED,
                )
            return updated_node
        text = value.evaluated_value
        if not isinstance(text, str) or is_accelerator_type(text):
            return updated_node
        model = parse_model(text)
        count = self._count(original_node)
        target = accelerator_type_for(model, count) if model is not None else None
        if target is None:
            code, message = unmappable(model or text, count, repr(text))
            self.report(value, message, severity=Severity.BLOCKING, code=code)
            return updated_node
        new_value = _requoted(value, target)
        self.report(value, f"{text!r} -> {target!r}", after=new_value)
        args = [
            arg.with_changes(value=new_value) if original is found else arg
            for original, arg in zip(original_node.args, updated_node.args)
        ]
        return updated_node.with_changes(args=args)

    # --- helpers -------------------------------------------------------------------------------------------------

    def _report_name(self, name: libcst.Name, arg: libcst.Arg) -> None:
        state = self.context.file.get(_TYPE_NAMES)
        note = state.notes.get(name) if isinstance(state, _TypeNames) else None
        if note is not None:
            self.report(name, note.message, severity=note.severity, code=note.code)
        elif _is_old_keyword(arg) and not _followed(state, name):
            self.report(
                name,
                f"gpu_type={name.value}: air-migrate cannot follow {name.value} to a string literal "
                "of this file, so it cannot tell whether it is an old GPU model name (which the runtime "
                "warns about): make sure its value is an accelerator type such as 'GPU_8xH100'",
                severity=Severity.MANUAL,
                code=NOT_FOLLOWED,
            )

    def _is_launch_call(self, call: libcst.Call) -> bool:
        return is_launch_call(self.get_metadata, call, self.context.text or self.module.code)

    def _count(self, call: libcst.Call) -> Optional[int]:
        return literal_count(call, lambda name: bound_names.int_value(self, name))

    def _is_type_member(self, value: libcst.BaseExpression) -> bool:
        """``GPUType.X`` (AM108's) or ``AcceleratorType.X`` (already new), however the class was imported."""
        if not isinstance(value, libcst.Attribute):
            return False
        names = qualified_names(self.get_metadata, value.value)
        return bool(names) and all(name.name in _TYPE_CLASSES for name in names)


def _decide(
    state: _TypeNames, kind: str, unread: Callable[[str], bool], facts: Optional[bound_names.BoundNames]
) -> None:
    """What becomes of each name given to a type keyword, once every cell is surveyed."""
    state.rewrites = {}
    if facts is None:
        return
    for name, uses in sorted(state.uses.items()):
        typed = [use for use in uses if use.role == "type"]
        if typed:
            _decide_name(state, name, uses, typed, kind, unread(name), facts)


def _decide_name(
    state: _TypeNames,
    name: str,
    uses: Sequence[_Use],
    typed: Sequence[_Use],
    kind: str,
    unread: bool,
    facts: bound_names.BoundNames,
) -> None:
    assert state.rewrites is not None
    bindings = facts.bindings.get(name, ())
    binding = facts.single_literal(name)
    if binding is None:
        if len(bindings) == 1 and bindings[0].member:
            return  # `GPU = GPUType.H100`: AM108 reports the member where it is written
        why = _why_not_followed(name, bindings)
        old = sorted({repr(b.literal) for b in bindings if isinstance(b.literal, str) and parse_model(b.literal)})
        if old:  # one of its values is an old model name: whatever the keyword, it is not done
            message = (
                f"{why}, among them to the old GPU model name {' and '.join(old)} (which the runtime warns "
                "about), so it is left as it is: give it, or this call, an accelerator type such as "
                "'GPU_8xH100'"
            )
        else:
            message = (
                f"{why}, so air-migrate cannot tell whether it is an old GPU model name (which the runtime "
                "warns about): make sure its value is an accelerator type such as 'GPU_8xH100'"
            )
        for use in typed:
            if use.keyword == _OLD_KEYWORD or old:
                state.notes[use.node] = _Note(NOT_FOLLOWED, message)
        return
    value = binding.literal
    shown = f"{name} ({value!r})"
    if not isinstance(value, str):
        for use in typed:
            state.notes[use.node] = _Note(*unmappable(str(value), use.count, shown), severity=Severity.BLOCKING)
        return
    if is_accelerator_type(value):
        return
    model = parse_model(value)
    targets: Dict[_Use, str] = {}
    for use in typed:
        target = accelerator_type_for(model, use.count) if model is not None else None
        if target is None:
            state.notes[use.node] = _Note(*unmappable(model or value, use.count, shown), severity=Severity.BLOCKING)
        else:
            targets[use] = target
    if len(targets) < len(typed):
        return
    chosen = sorted(set(targets.values()))
    literal = state.literals.get((name, binding.where))
    problem = _why_kept(name, uses, typed, binding, chosen, literal, unread, kind)
    if problem is not None:
        for use in typed:
            state.notes[use.node] = _Note(
                NOT_FOLLOWED, f'{shown} {problem}, so it is left as it is: write accelerator_type="{targets[use]}" here'
            )
        return
    assert literal is not None
    where = ", ".join(sorted({_place(use.where, kind) for use in typed}))
    message = f"{value!r} -> {chosen[0]!r}: {name} is only used as the GPU type of the call(s) {where}"
    review = kind == "python"
    if review:
        message += f" (check that no other module imports {name} from here)"
    state.rewrites[literal] = (chosen[0], message, Severity.REVIEW if review else Severity.CHANGE)


def _why_not_followed(name: str, bindings: Sequence[bound_names.NameBinding]) -> str:
    if not bindings:
        return f"{name} is not bound in this file (imported from another module, or set by a %run notebook?)"
    if len(bindings) > 1:
        return f"{name} is bound more than once in this file"
    if bindings[0].literal is not None:
        return f"{name} is bound under an if, a loop or a function, not by a plain statement of its cell"
    return f"{name} is not bound to a string literal (it is imported, computed or set in a loop)"


def _why_kept(
    name: str,
    uses: Sequence[_Use],
    typed: Sequence[_Use],
    binding: bound_names.NameBinding,
    chosen: List[str],
    literal: Optional[libcst.SimpleString],
    unread: bool,
    kind: str,
) -> Optional[str]:
    """Why the literal of ``name`` is not rewritten, if it is not."""
    if len(chosen) > 1:
        return f"is the GPU type of calls that need different accelerator types ({' and '.join(chosen)})"
    other = next((use for use in uses if use.role != "type"), None)
    if other is not None:
        return f"is also used {_place(other.where, kind)} for something other than a GPU type"
    if unread:
        return "also appears in a cell or magic air-migrate cannot read"
    if any(use.where <= binding.where for use in typed):
        return "is used before the statement that binds it"
    if literal is None:
        return 'is not bound by a plain `name = "..."` statement'
    return None


def _place(where: bound_names.Where, kind: str) -> str:
    cell, line = where
    return f"on line {line}" if kind == "python" else f"in cell {cell}"


def _followed(state: Optional[_TypeNames], name: libcst.Name) -> bool:
    """The survey saw this read (the decision about its name covers it, even when it says nothing)."""
    return isinstance(state, _TypeNames) and any(use.node is name for use in state.uses.get(name.value, ()))


def _is_old_keyword(arg: libcst.Arg) -> bool:
    return arg.keyword is not None and arg.keyword.value == _OLD_KEYWORD


def _plain_assignment(small: libcst.BaseSmallStatement) -> Tuple[Optional[str], Optional[libcst.BaseExpression]]:
    """``(name, value)`` for ``name = value`` and ``name: T = value``."""
    if (
        isinstance(small, libcst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, libcst.Name)
    ):
        return small.targets[0].target.value, small.value
    if isinstance(small, libcst.AnnAssign) and isinstance(small.target, libcst.Name):
        return small.target.value, small.value
    return None, None


def _requoted(value: libcst.SimpleString, target: str) -> libcst.SimpleString:
    """``target`` as a literal with the quotes and prefix of ``value``."""
    quoted = value.value
    prefix_length = len(quoted) - len(quoted.lstrip("rRbBuU"))
    quote = quoted[prefix_length : prefix_length + 3]
    if quote not in ('"""', "'''"):
        quote = quote[0]
    return libcst.SimpleString(f"{quoted[:prefix_length]}{quote}{target}{quote}")
