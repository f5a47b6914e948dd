"""Surveying one cell for the ``TorchDistributor`` rewrite: its constructor calls, runs, bindings and reads.

Nothing is decided here (:mod:`~air_migrate.rules.torch_distributor.plan` does that once every cell is known); the
survey only records, into the file's :class:`~air_migrate.rules.torch_distributor.facts.FileFacts`:

* each ``TorchDistributor(...)`` call, found through the imports that bind it (any form or alias, resolved by scope),
  read into a configuration (:mod:`~air_migrate.rules.torch_distributor.config`), with what becomes of the object:
  assigned to a variable, or ``.run(...)`` on it at once;
* every module-level binding (imports, defs, classes, assignments) and every read of a module-level name, since a
  notebook's cells share those; and the bindings and reads of a local distributor variable;
* each ``x.run(...)`` and ``x._train_on_dataframe(...)`` on a variable, with what ``run`` is given;
* uses of ``TorchDistributor`` or ``DeepspeedTorchDistributor`` that are reported as they are.

The statements of the cell's prefix (earlier cells' imports) are recorded by their own cell, never twice.
"""

from __future__ import annotations

from typing import Dict, Iterator, Optional, Set, Tuple, cast

import libcst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import (
    Access,
    Assignment,
    BaseAssignment,
    BuiltinScope,
    GlobalScope,
    ImportAssignment,
    ParentNodeProvider,
    PositionProvider,
    Scope,
    ScopeProvider,
)

from air_migrate.rules.torch_distributor.codes import DEEPSPEED, DISTRIBUTOR_USED, SCRIPT, TARGET
from air_migrate.rules.torch_distributor.config import (
    NAME_ALL_GPUS,
    NAME_AT_MODULE_LEVEL,
    CountValue,
    read_constructor,
    script_problem,
)
from air_migrate.rules.torch_distributor.facts import (
    CLASS,
    DEEPSPEED_DISTRIBUTOR,
    DEF,
    DEVICE_COUNT,
    IMPORT,
    OTHER,
    RUN,
    TORCH_DISTRIBUTOR,
    TRAIN_ON_DATAFRAME,
    Binding,
    Construction,
    FileFacts,
    MethodCall,
    Reference,
    Target,
    Use,
    Var,
    Where,
)
from air_migrate.rule_base import Rule, Severity
from air_migrate.rules.targets import qualified_names

METHODS = (RUN, TRAIN_ON_DATAFRAME)
_STRINGS = (libcst.SimpleString, libcst.ConcatenatedString, libcst.FormattedString)


class CellSurvey:
    """Records one cell's facts; ``rule`` gives the cell's metadata and context."""

    def __init__(self, rule: Rule, facts: FileFacts) -> None:
        self._rule = rule
        self._facts = facts
        self._skip = rule.context.prefix_lines
        self._prefix = frozenset(rule.module.body[: len(rule.context.prefix)])
        """The statements of the earlier cells' imports, put before the cell's own."""
        self._cell = rule.context.number
        self._constructions: Dict[libcst.CSTNode, Construction] = {}
        """The class expression of each constructor call of the cell -> its :class:`Construction`."""
        self._locals: Dict[Var, None] = {}
        """The distributor variables of functions, in the order they are met."""

    def run(self, module: libcst.Module) -> None:
        scopes = {cast(Scope, scope) for scope in self._rule.metadata[ScopeProvider].values() if scope is not None}
        self._survey_classes(scopes)
        for var in self._locals:
            self._survey_local(var)
        global_scope = self._rule.get_metadata(ScopeProvider, module)
        assert isinstance(global_scope, GlobalScope)  # (a module's scope is always its global scope)
        self._survey_bindings(global_scope)
        for scope in scopes:
            for access in scope.accesses:
                if self._own(access.node) and _is_global(access):
                    self._survey_use(Var(_root_name(access.node)), access.node)

    # --- the distributor classes, through the imports that bind them ---------------------------------------------

    def _survey_classes(self, scopes: Set[Scope]) -> None:
        seen: Set[libcst.CSTNode] = set()
        local_imports: Dict[Var, ImportAssignment] = {}
        for scope in scopes:
            for assignment in scope.assignments:
                if not isinstance(assignment, ImportAssignment):
                    continue
                imported = _imported_name(assignment)
                if imported != "pyspark" and not imported.startswith("pyspark."):
                    continue
                if not isinstance(scope, GlobalScope) and self._own(assignment.node):
                    local_imports[Var(assignment.name.split(".")[0], scope)] = assignment
                for access in assignment.references:
                    node = self._outermost(access.node)
                    if node in seen or not self._own(node):
                        continue
                    seen.add(node)
                    self._survey_class_reference(node)
        for var, assignment in local_imports.items():  # once every constructor call is known
            self._survey_local_import(var, assignment)

    def _survey_local_import(self, var: Var, assignment: ImportAssignment) -> None:
        """A function's own import from pyspark (``from pyspark.ml.torch.distributor import TorchDistributor`` in
        ``main()``): its binding and its reads, so that it goes with the runs it served, as a module-level one."""
        self._bind(var, assignment)
        for access in assignment.references:
            if self._own(access.node):
                self._survey_use(var, access.node)

    def _survey_class_reference(self, node: libcst.CSTNode) -> None:
        names = {name.name for name in qualified_names(self._rule.get_metadata, node)}
        if not names & {TORCH_DISTRIBUTOR, DEEPSPEED_DISTRIBUTOR}:
            return
        shown = self._rule.module.code_for_node(node)
        parent = self._parent(node)
        constructed = isinstance(parent, libcst.Call) and parent.func is node
        if len(names) > 1:
            self._refer(
                node,
                DISTRIBUTOR_USED,
                f"{shown} is bound to more than one thing here, so air-migrate cannot "
                "tell whether it is pyspark's TorchDistributor: migrate it by hand",
            )
        elif DEEPSPEED_DISTRIBUTOR in names:
            self._refer(
                parent if constructed and parent is not None else node,
                DEEPSPEED,
                f"{shown} is not rewritten: decorate the training function with @distributed(num_accelerators=N) "
                "(numGpus ranks on this node) and call deepspeed.initialize(..., config=...) inside it with the "
                "deepspeedConfig; nnodes > 1 needs remote=True on Ray",
            )
        elif constructed:
            assert isinstance(parent, libcst.Call)
            self._survey_construction(parent)
        elif (
            isinstance(parent, libcst.Arg)
            and parent.value is node
            and parent.keyword is None
            and isinstance(self._parent(parent), libcst.ClassDef)
        ):
            subclass = self._parent(parent).name.value  # type: ignore[union-attr]
            self._refer(
                node,
                DISTRIBUTOR_USED,
                f"{subclass} subclasses {shown}: a class definition is not a run, so "
                f"it is left as it is (and so is the import it needs); runs of {subclass} are not rewritten",
                severity=Severity.INFO,
            )
        else:
            self._refer(
                node,
                DISTRIBUTOR_USED,
                f"{shown} is used here other than as {shown}(...).run(fn, ...), "
                "which air-migrate cannot rewrite: migrate it by hand",
            )

    def _survey_construction(self, call: libcst.Call) -> None:
        construction = Construction(
            call,
            read_constructor(call, self._is_device_count, self._read_count_name),
            where=self._where(call),
            deferred=self._in_function(call),
        )
        self._constructions[call.func] = construction
        self._facts.constructions.append(construction)
        parent = self._parent(call)
        if isinstance(parent, libcst.Attribute) and parent.value is call:
            method_call = self._parent(parent)
            if isinstance(method_call, libcst.Call) and method_call.func is parent:
                construction.method = self._method_call(method_call, parent.attr.value)
        elif isinstance(parent, libcst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            statement = self._parent(parent)
            if isinstance(target, libcst.Name) and isinstance(statement, libcst.SimpleStatementLine):
                construction.holder = self._var_assigned(target)
                construction.assign = parent
                construction.statement = statement
                if construction.holder.scope is not None:
                    self._locals[construction.holder] = None  # surveyed once every constructor call is known

    def _refer(self, node: libcst.CSTNode, code: str, message: str, severity: Severity = Severity.BLOCKING) -> None:
        self._facts.references.append(Reference(node, code, message, severity))

    def _read_count_name(self, name: libcst.Name) -> CountValue:
        """What a name given as the count is: for a local, the integer or ``torch.cuda.device_count()`` every
        binding of it gives; a module-level name (settled by the planner once every cell is known); or ``None``."""
        scope = self._rule.get_metadata(ScopeProvider, name, None)
        while scope is not None and not isinstance(scope, GlobalScope):
            assignments = list(scope.assignments[name.value]) if name.value in scope.assignments else []
            if assignments:
                values = {self._count_value(_bound_node(assignment)) for assignment in assignments}
                return values.pop() if len(values) == 1 else None
            scope = scope.parent
        return NAME_AT_MODULE_LEVEL if scope is not None else None

    def _count_value(self, target: libcst.CSTNode) -> CountValue:
        """What ``target = <value>`` gives a count held in ``target``: an integer literal, :data:`NAME_ALL_GPUS` for
        ``torch.cuda.device_count()``, or ``None`` for anything else (or any other binding)."""
        value = self._assigned_value(target)
        if isinstance(value, libcst.Integer):
            return int(value.evaluated_value)
        return NAME_ALL_GPUS if value is not None and self._is_device_count(value) else None

    def _assigns_device_count(self, target: libcst.CSTNode) -> bool:
        """``target`` is the name of ``target = torch.cuda.device_count()`` (or ``target: int = ...``)."""
        value = self._assigned_value(target)
        return value is not None and self._is_device_count(value)

    def _assigned_value(self, target: libcst.CSTNode) -> Optional[libcst.BaseExpression]:
        """The value of ``target = value`` (one target) or ``target: T = value``, when ``target`` is bound so."""
        parent = self._parent(target)
        if isinstance(parent, libcst.AssignTarget):
            parent = self._parent(parent)
            if isinstance(parent, libcst.Assign) and len(parent.targets) == 1:
                return parent.value
        elif isinstance(parent, libcst.AnnAssign) and parent.target is target and parent.value is not None:
            return parent.value
        return None

    def _next_span(self, target: libcst.CSTNode) -> Optional[Tuple[Where, Where]]:
        """For the target of a plain assignment statement: from the end of the assignment to the end of the next
        statement of its block (the rest of its own line included); ``None`` for any other binding."""
        small = self._parent(target)
        if isinstance(small, libcst.AssignTarget):
            small = self._parent(small)
        line = self._parent(small) if isinstance(small, (libcst.Assign, libcst.AnnAssign)) else None
        block = self._parent(line) if isinstance(line, libcst.SimpleStatementLine) else None
        body = list(getattr(block, "body", ())) if isinstance(block, (libcst.Module, libcst.IndentedBlock)) else []
        index = next((i for i, statement in enumerate(body) if statement is line), None)
        if index is None:
            return None
        assert small is not None and line is not None  # (``line`` is a statement of the block, so both were found)
        last = body[index + 1] if index + 1 < len(body) else line
        start = self._rule.get_metadata(PositionProvider, small).end
        end = self._rule.get_metadata(PositionProvider, last).end
        return (self._cell, start.line - self._skip, start.column + 1), (
            self._cell,
            end.line - self._skip,
            end.column + 1,
        )

    def _in_function(self, node: libcst.CSTNode) -> bool:
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, libcst.Module):
            if isinstance(parent, (libcst.FunctionDef, libcst.Lambda)):
                return True
            parent = self._parent(parent)
        return False

    def _is_device_count(self, node: libcst.BaseExpression) -> bool:
        if not isinstance(node, libcst.Call) or node.args:
            return False
        names = qualified_names(self._rule.get_metadata, node.func)
        return bool(names) and all(name.name == DEVICE_COUNT for name in names)

    # --- bindings ------------------------------------------------------------------------------------------------

    def _survey_bindings(self, scope: GlobalScope) -> None:
        for assignment in scope.assignments:
            if "." in assignment.name or not self._own(_bound_node(assignment)):
                continue  # `import a.b` also binds `a.b`: only the name Python binds, `a`, is a variable
            self._bind(Var(assignment.name), assignment)

    def _survey_local(self, var: Var) -> None:
        """A function's distributor variable: its bindings, then each of its reads once (a read may reach several
        bindings)."""
        scope = var.scope
        assert isinstance(scope, Scope)
        reads: Dict[libcst.CSTNode, None] = {}
        for assignment in scope.assignments[var.name]:
            self._bind(var, assignment)
            reads.update((access.node, None) for access in assignment.references)
        for node in reads:
            self._survey_use(var, node)

    def _bind(self, var: Var, assignment: object) -> None:
        node = getattr(assignment, "node")
        if isinstance(assignment, ImportAssignment):
            for alias in _aliases_binding(assignment.node, var.name):
                self._facts.bind(
                    Binding(
                        var, self._where(node), node, IMPORT, _alias_target(node, alias), alias, self._guarded(node)
                    )
                )
            return
        kind = DEF if isinstance(node, libcst.FunctionDef) else CLASS if isinstance(node, libcst.ClassDef) else OTHER
        construction = next(
            (
                c
                for c in self._facts.constructions
                if c.holder == var and c.assign is not None and c.assign.targets[0].target is node
            ),
            None,
        )
        straight = construction is not None and self._in_own_block(construction.assign)  # type: ignore[arg-type]
        count = self._count_value(node) if kind == OTHER and isinstance(node, libcst.Name) else None
        span = self._next_span(node) if construction is not None or count is not None else None
        string = kind == OTHER and isinstance(node, libcst.Name) and isinstance(self._assigned_value(node), _STRINGS)
        self._facts.bind(
            Binding(
                var,
                self._where(node),
                node,
                kind,
                construction=construction,
                straight=straight,
                device_count=count == NAME_ALL_GPUS,
                literal=count if isinstance(count, int) else None,
                next_span=span,
                string=string,
            )
        )

    def _in_own_block(self, node: libcst.CSTNode) -> bool:
        """The statement holding ``node`` is one of its module's (or function's) own statements."""
        statement = self._parent(node)
        block = self._parent(statement) if statement is not None else None
        if isinstance(block, libcst.Module):
            return True
        return isinstance(block, libcst.IndentedBlock) and isinstance(self._parent(block), libcst.FunctionDef)

    def _guarded(self, node: libcst.CSTNode) -> bool:
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, libcst.Module):
            if isinstance(parent, (libcst.Try, libcst.TryStar, libcst.If)):
                return True
            parent = self._parent(parent)
        return False

    # --- reads ---------------------------------------------------------------------------------------------------

    def _survey_use(self, var: Var, node: libcst.CSTNode) -> None:
        use = Use(var, node, self._where(node), self._deferred(node, var))
        parent = self._parent(node)
        if isinstance(parent, libcst.Attribute) and parent.value is node and parent.attr.value in METHODS:
            call = self._parent(parent)
            if isinstance(call, libcst.Call) and call.func is parent:
                use.method = self._method_call(call, parent.attr.value)
        elif isinstance(parent, libcst.Arg) and parent.value is node:
            call = self._parent(parent)
            if isinstance(call, libcst.Call) and _is_run(call) and call.args[0] is parent:
                use.target_of = call
        elif isinstance(parent, libcst.Call) and parent.func is node:
            use.called = True
        use.construction = self._construction_around(node)
        self._facts.use(use)

    def _deferred(self, node: libcst.CSTNode, var: Var) -> bool:
        """A function or lambda lies between ``node`` and the scope of ``var`` (the module, or its function)."""
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, libcst.Module):
            if isinstance(parent, (libcst.FunctionDef, libcst.Lambda)):
                scope = (
                    self._rule.get_metadata(ScopeProvider, parent.body, None)
                    if isinstance(parent, libcst.FunctionDef)
                    else None
                )
                return var.scope is None or scope is not var.scope
            parent = self._parent(parent)
        return False

    def _construction_around(self, node: libcst.CSTNode) -> Optional[Construction]:
        """The constructor call whose class expression holds ``node`` (``td`` in ``td.TorchDistributor(2)``)."""
        while node not in self._constructions:
            parent = self._parent(node)
            if not isinstance(parent, libcst.Attribute) or parent.value is not node:
                return None
            node = parent
        return self._constructions[node]

    def _method_call(self, call: libcst.Call, method: str) -> MethodCall:
        found = self._facts.method_calls.get(call)
        if found is None:
            value_used = not isinstance(self._parent(call), libcst.Expr)
            target = self._target(call) if method == RUN else None
            found = MethodCall(call, method, value_used, target)
            self._facts.method_calls[call] = found
        return found

    def _target(self, call: libcst.Call) -> Target:
        """What ``run(...)`` is given: a module-level name, or why that is not what it is given."""
        if not call.args:
            return Target(call, code=TARGET, problem="run() is given no function")
        first = call.args[0]
        value = first.value
        shown = self._rule.module.code_for_node(value)
        if first.keyword is not None or first.star:
            return Target(
                first, code=TARGET, problem="the function is passed by keyword or unpacked: pass it first, by position"
            )
        if isinstance(value, _STRINGS):
            return Target(value, code=SCRIPT, problem=script_problem(shown))
        if isinstance(value, libcst.Lambda):
            return Target(
                value,
                code=TARGET,
                problem="run is given a lambda: define it with def at module level so "
                "that it can be decorated with @distributed(...)",
            )
        if isinstance(value, libcst.Attribute):
            return Target(
                value,
                code=TARGET,
                problem=f"run is given {shown}, a method or attribute: the decorator "
                "goes on a module-level def; call the method from such a function",
            )
        if not isinstance(value, libcst.Name):
            return Target(
                value,
                code=TARGET,
                problem=f"run is given {shown}, not the name of a function: run a module-level def instead",
            )
        local = self._local_binding(value)
        if local is None:
            return Target(value, var=Var(value.value))
        if isinstance(local, libcst.FunctionDef):
            return Target(
                value,
                code=TARGET,
                problem=f"{shown} is defined inside another function: move it to "
                "module level so that it can be decorated with @distributed(...)",
            )
        if isinstance(self._assigned_value(local), _STRINGS):
            return Target(value, code=SCRIPT, problem=script_problem(shown, bound=True))
        return Target(value, code=TARGET, problem=f"{shown} is a local variable, not a module-level def")

    def _local_binding(self, name: libcst.Name) -> Optional[libcst.CSTNode]:
        """What binds ``name`` where it is read, when that is not a module-level binding."""
        scope = self._rule.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return None
        for access in scope.accesses[name.value]:
            if access.node is name and not _is_global(access):
                return _bound_node(next(iter(access.referents)))
        return None

    # --- helpers -------------------------------------------------------------------------------------------------

    def _var_assigned(self, name: libcst.Name) -> Var:
        scope = self._rule.get_metadata(ScopeProvider, name, None)
        return Var(name.value, None if scope is None or isinstance(scope, GlobalScope) else scope)

    def _own(self, node: libcst.CSTNode) -> bool:
        """Part of the cell itself, not of the earlier cells' imports put before it (found by the top-level
        statement that holds it, which costs less than its position)."""
        if not self._prefix:
            return True
        parent = self._parent(node)
        while parent is not None and not isinstance(parent, libcst.Module):
            node, parent = parent, self._parent(parent)
        return node not in self._prefix

    def _where(self, node: libcst.CSTNode) -> Where:
        start = self._rule.get_metadata(PositionProvider, node).start
        return (self._cell, start.line - self._skip, start.column + 1)

    def _parent(self, node: libcst.CSTNode) -> Optional[libcst.CSTNode]:
        return self._rule.get_metadata(ParentNodeProvider, node, None)

    def _outermost(self, node: libcst.CSTNode) -> libcst.CSTNode:
        """``a.b.c`` for the read of ``a`` (or of ``a.b``) that starts it."""
        parent = self._parent(node)
        while isinstance(parent, libcst.Attribute) and parent.value is node:
            node, parent = parent, self._parent(parent)
        return node


def survey_cell(rule: Rule, module: libcst.Module, facts: FileFacts) -> None:
    """Add what ``module`` (the cell ``rule`` runs over, prefix included) holds to ``facts``."""
    CellSurvey(rule, facts).run(module)


def _bound_node(assignment: BaseAssignment) -> libcst.CSTNode:
    """The node that binds a name in a scope below the builtins' one, where every binding is an :class:`Assignment`."""
    assert isinstance(assignment, Assignment)
    return assignment.node


def _is_global(access: Access) -> bool:
    """A read of a module-level name: bound at module level (in this cell or an earlier one), or a builtin."""
    return all(isinstance(referent.scope, (GlobalScope, BuiltinScope)) for referent in access.referents)


def _is_run(call: libcst.Call) -> bool:
    return isinstance(call.func, libcst.Attribute) and call.func.attr.value == RUN and bool(call.args)


def _root_name(node: libcst.CSTNode) -> str:
    while isinstance(node, libcst.Attribute):
        node = node.value
    return node.value if isinstance(node, libcst.Name) else ""


def _imported_name(assignment: ImportAssignment) -> str:
    """The dotted name an import binding stands for (``pyspark.ml.torch.distributor.TorchDistributor``)."""
    aliases = list(_aliases_binding(assignment.node, assignment.name.split(".")[0]))
    return _alias_target(assignment.node, aliases[0]) if aliases else ""


def _aliases_binding(node: libcst.CSTNode, name: str) -> Iterator[libcst.ImportAlias]:
    """The aliases of an import statement that bind ``name``."""
    if not isinstance(node, (libcst.Import, libcst.ImportFrom)) or isinstance(node.names, libcst.ImportStar):
        return
    for alias in node.names:
        bound = get_full_name_for_node(alias.asname.name) if alias.asname else get_full_name_for_node(alias.name)
        if (bound or "").split(".")[0] == name:
            yield alias


def _alias_target(node: libcst.CSTNode, alias: libcst.ImportAlias) -> str:
    name = get_full_name_for_node(alias.name) or ""
    if isinstance(node, libcst.ImportFrom):
        module = get_full_name_for_node(node.module) if node.module is not None else ""
        return f"{'.' * len(node.relative)}{module}.{name}"
    return name
