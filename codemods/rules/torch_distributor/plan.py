"""Deciding the ``TorchDistributor`` rewrite of a whole file, once every cell has been surveyed.

A run ``d.run(fn, *args)`` (or ``TorchDistributor(...).run(fn, *args)``) becomes ``fn.distributed(*args)`` only
when all of this holds, so that the program means what it meant:

* its distributor's settings carry over exactly (:mod:`~air_migrate.rules.torch_distributor.config`; a count held
  in a name is settled here, once every cell is known), and a distributor variable is bound to
  ``TorchDistributor(...)`` calls only, and used for nothing but its runs: bound once, every run is that
  distributor's; rebound (a notebook that builds one per cell), each run is the last binding's before it, when every
  binding is a plain statement of its block and no run waits in a function;
* ``fn`` names one module-level ``def`` of the file, used for nothing but runs, every one of them rewritable and
  with the same settings (one decorator serves them all);
* ``distributed`` names nothing else in the file (the decorator needs the name).

Then ``fn`` gets ``@distributed(...)``, the variable's assignment goes once none of its uses is left, and so does the
``TorchDistributor`` import. The decorator's name comes from an existing ``databricks.air`` import when one is in
effect where the function is defined; otherwise ``from databricks.air import distributed`` takes the place of the
``TorchDistributor`` import, joins an existing ``from databricks.air import ...``, or goes just above the function,
whichever is in effect there: after the last ``%pip`` or ``restartPython()`` before the function, never before.

Everything else is a :class:`Note` for the report. The plan is all the rewrites that can be made; whether the file is
written with them (``--partial``) or left as it is (a blocking note) is the driver's choice.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst

from air_migrate.rule_base import Severity
from air_migrate.rules.torch_distributor.codes import (
    CONFIGURATIONS,
    DATAFRAME,
    DISTRIBUTOR_USED,
    FUNCTION_USED,
    NAME_CLASH,
    SCRIPT,
    TARGET,
)
from air_migrate.rules.torch_distributor.comments import comments_in
from air_migrate.rules.torch_distributor.config import CountValue, script_problem
from air_migrate.rules.torch_distributor.facts import (
    CLASS,
    DEF,
    IMPORT,
    LAUNCHER_MODULES,
    LAUNCHERS,
    RUN,
    TORCH_DISTRIBUTOR,
    TRAIN_ON_DATAFRAME,
    Binding,
    Construction,
    FileFacts,
    MethodCall,
    Use,
    Var,
    Where,
)

NEW_MODULE = "databricks.air"
DECORATOR = "distributed"
_TORCH_DISTRIBUTOR_IMPORTS = frozenset({TORCH_DISTRIBUTOR, TORCH_DISTRIBUTOR.rsplit(".", 1)[0]})
"""What an import that only serves ``TorchDistributor`` imports: the class, or its module."""


@dataclasses.dataclass(frozen=True)
class Note:
    """A report line to make at a node: something a person must do (``blocking`` keeps the file as it is), or a note
    that needs nothing done (``info``: it never fails ``--check``)."""

    code: str
    message: str
    severity: Severity = Severity.BLOCKING


@dataclasses.dataclass(frozen=True)
class RunEdit:
    """A run that becomes ``function.distributed(...)`` (``[0]`` when its value is used)."""

    function: str
    receiver: str
    """How the run's receiver reads in the report: the variable, or ``TorchDistributor(...)``."""
    rank_zero: bool


@dataclasses.dataclass
class ImportEdit:
    """What becomes of one import statement (an ``Import`` or ``ImportFrom`` node)."""

    drop: List[libcst.ImportAlias] = dataclasses.field(default_factory=list)
    """Its aliases that go: ``TorchDistributor`` is no longer used."""
    replacement: Optional[str] = None
    """When every alias goes: the import that takes its place (else the statement goes)."""
    add_after: Optional[str] = None
    """A new import statement just after this one."""
    add_name: Optional[str] = None
    """A name this ``from databricks.air import ...`` gains."""


@dataclasses.dataclass
class Plan:
    """Every change of the file, by the original node it applies to, and every note."""

    notes: Dict[libcst.CSTNode, List[Note]] = dataclasses.field(default_factory=dict)
    runs: Dict[libcst.Call, RunEdit] = dataclasses.field(default_factory=dict)
    decorators: Dict[libcst.FunctionDef, str] = dataclasses.field(default_factory=dict)
    """The decorator each function gains, as source (``distributed(num_accelerators=2)``)."""
    cpu: Dict[libcst.Arg, str] = dataclasses.field(default_factory=dict)
    """``use_gpu=False`` arguments of rewritten distributors -> the function(s) they ran."""
    removed: Dict[libcst.Assign, str] = dataclasses.field(default_factory=dict)
    """Distributor assignments that go -> the variable's name."""
    imports: Dict[libcst.CSTNode, ImportEdit] = dataclasses.field(default_factory=dict)
    before: Dict[libcst.FunctionDef, str] = dataclasses.field(default_factory=dict)
    """A new import statement just above a function."""
    comments: Dict[libcst.FunctionDef, List[str]] = dataclasses.field(default_factory=dict)
    """The comments of the distributors a function's decorator replaces, to go above that decorator."""

    def keep_comments(self, function: libcst.FunctionDef, comments: Sequence[str]) -> None:
        kept = self.comments.setdefault(function, [])
        kept.extend(comment for comment in comments if comment not in kept)

    def note(self, node: libcst.CSTNode, code: str, message: str, severity: Severity = Severity.BLOCKING) -> None:
        notes = self.notes.setdefault(node, [])
        if all(note.message != message for note in notes):
            notes.append(Note(code, message, severity))


@dataclasses.dataclass(frozen=True)
class _Launcher:
    """How the decorator is spelled in this file, and the import statement that binds it that way."""

    expression: str
    """``distributed``, its alias, or ``alias.distributed`` for the module imported as ``alias``."""
    statement: str
    bindings: Tuple[Binding, ...]
    """The existing imports that bind it (none: it is imported by the rewrite)."""

    @classmethod
    def reusing(cls, bindings: Sequence[Binding]) -> "_Launcher":
        """The spelling of existing imports; imported again (after a restart) from ``databricks.air``, which
        ``serverless_gpu`` imports become anyway."""
        ordered = tuple(sorted(bindings, key=lambda binding: binding.where))
        name = ordered[0].var.name
        if isinstance(ordered[0].node, libcst.ImportFrom):
            alias = "" if name == DECORATOR else f" as {name}"
            return cls(name, f"from {NEW_MODULE} import {DECORATOR}{alias}", ordered)
        return cls(f"{name}.{DECORATOR}", f"import {NEW_MODULE} as {name}", ordered)


@dataclasses.dataclass(eq=False)
class _Run:
    """One run being decided: its call, settings and function, and why it cannot be rewritten (if so)."""

    method: MethodCall
    construction: Optional[Construction]
    var: Optional[Var]
    function: Optional[Var] = None
    definition: Optional[Binding] = None
    blocked: bool = False


def plan_file(facts: FileFacts) -> Plan:
    """Decide every rewrite and note of the file described by ``facts``."""
    return _Planner(facts).decide()


class _Planner:
    def __init__(self, facts: FileFacts) -> None:
        self.facts = facts
        self.plan = Plan()
        self.runs: List[_Run] = []
        self.owned: Dict[Construction, List[Use]] = {}
        """Each distributor assigned to a variable -> the uses of the variable that read it."""
        self.decorated: Dict[libcst.Call, libcst.FunctionDef] = {}
        """Each run rewritten -> the function that gains the decorator."""
        self.where_defined: Dict[libcst.CSTNode, Where] = {}

    def decide(self) -> Plan:
        for reference in self.facts.references:
            self.plan.note(reference.node, reference.code, reference.message, reference.severity)
        self._note_unresolved_class()
        for construction in self.facts.constructions:
            self._read_construction(construction)
        for var in dict.fromkeys(c.holder for c in self.facts.constructions if c.holder is not None):
            self._read_variable(var)
        for run in self.runs:
            self._check_target(run)
        functions = self._group_by_function()
        for function, runs in functions.items():
            self._check_function(function, runs)
        converted = {function: runs for function, runs in functions.items() if not any(r.blocked for r in runs)}
        removable = self._removable(converted)
        launcher = self._launcher(converted, removable)
        if launcher is not None:
            for runs in converted.values():
                self._rewrite(runs, launcher.expression)
            consumed = self._remove_variables(converted, removable)
            self._remove_imports(consumed)
            self._place_imports(converted, launcher)
        return self.plan

    # --- distributors --------------------------------------------------------------------------------------------

    def _note_unresolved_class(self) -> None:
        """``TorchDistributor`` read without any binding in the file: it comes from code this tool cannot see."""
        var = Var("TorchDistributor")
        if self.facts.bindings.get(var):
            return
        for use in self.facts.uses.get(var, []):
            self.plan.note(
                use.node,
                DISTRIBUTOR_USED,
                "TorchDistributor is not imported in this file (a %run "
                "notebook or a cell air-migrate cannot read?), so it is left as it is: import it from "
                "pyspark.ml.torch.distributor here and run air-migrate again",
                severity=Severity.MANUAL,
            )

    def _read_construction(self, construction: Construction) -> None:
        pending = construction.reading.count_name
        if pending is not None:  # `num_processes=n`: what does n hold there, in any cell?
            construction.reading = construction.reading.settled(self._count_held(pending.name, construction))
        for problem in construction.reading.problems:
            self.plan.note(problem.node, problem.code, problem.message)
        method = construction.method
        if method is not None:
            self._read_method(method, construction, None)
        elif construction.holder is None:
            self.plan.note(
                construction.call,
                DISTRIBUTOR_USED,
                "this TorchDistributor is passed on or stored, "
                "not assigned to a variable nor run at once, so air-migrate cannot follow it: migrate "
                "it by hand",
            )

    def _count_held(self, name: str, construction: Construction) -> CountValue:
        """What the module-level name ``name`` holds where ``construction`` reads it as its count: the value every
        binding gives it, or that of the binding just before the constructor (``n = torch.cuda.device_count()``
        again in each cell); ``None`` when that cannot be told."""
        if _mentions(self.facts.unparsed, name):
            return None
        bindings = sorted(self.facts.bindings.get(Var(name), []), key=lambda binding: binding.where)
        values = {binding.count for binding in bindings}
        if len(values) == 1:
            return values.pop()
        if construction.deferred:
            return None  # read when its function is called, after whichever binding ran last
        for binding in bindings:
            if binding.just_before(construction.where) and not any(
                binding.where < other.where < construction.where for other in bindings
            ):
                return binding.count
        return None

    def _read_variable(self, var: Var) -> None:
        owned = self._uses_by_construction(var)
        if owned is None:
            for use in self.facts.uses.get(var, []):
                self.plan.note(
                    use.node,
                    DISTRIBUTOR_USED,
                    f"{var.name} is bound more than once, or not only to a "
                    "TorchDistributor, so air-migrate cannot tell which distributor runs here: migrate "
                    "it by hand",
                )
            return
        for construction, uses in owned:
            self.owned[construction] = uses
            if not uses and construction.assign is not None:
                self.plan.note(
                    construction.assign,
                    DISTRIBUTOR_USED,
                    f"{var.name} = TorchDistributor(...) is never "
                    "run in this file, so it is left as it is (and so is its import): remove it if nothing "
                    "else uses it",
                    severity=Severity.MANUAL,
                )
            for use in uses:
                if use.method is not None:
                    self._read_method(use.method, construction, var)
                else:
                    self.plan.note(
                        use.node,
                        DISTRIBUTOR_USED,
                        f"{var.name}, a TorchDistributor, is used here for "
                        "more than its runs (passed on, copied or inspected), so it cannot be taken out: "
                        "migrate this use by hand",
                    )

    def _uses_by_construction(self, var: Var) -> Optional[List[Tuple[Construction, List[Use]]]]:
        """Each distributor ``var`` is bound to, with the uses that read it; ``None`` when that cannot be told.

        Bound once, every use reads that one. Bound several times (a notebook that builds a distributor in each
        cell), each use reads the last binding before it, provided every binding is a plain statement of its block
        (nothing conditional) and no use waits in a function to be called later."""
        bindings = sorted(self.facts.bindings.get(var, []), key=lambda binding: binding.where)
        uses = self.facts.uses.get(var, [])
        if not bindings or any(binding.construction is None for binding in bindings):
            return None
        if len(bindings) == 1:
            return [(bindings[0].construction, list(uses))]  # type: ignore[list-item]
        if any(use.deferred for use in uses):
            return None
        if not all(binding.straight for binding in bindings) or any(use.where < bindings[0].where for use in uses):
            return _uses_just_after(bindings, uses)
        owned: List[Tuple[Construction, List[Use]]] = []
        for binding, following in zip(bindings, [*bindings[1:], None]):
            mine = [
                use for use in uses if binding.where < use.where and (following is None or use.where < following.where)
            ]
            owned.append((binding.construction, mine))  # type: ignore[arg-type]
        return owned

    def _read_method(self, method: MethodCall, construction: Construction, var: Optional[Var]) -> None:
        if method.method == TRAIN_ON_DATAFRAME:
            self.plan.note(
                method.call,
                DATAFRAME,
                "_train_on_dataframe trains on a Spark DataFrame across the "
                "cluster (local_mode=False), which has no @distributed counterpart: load the data inside "
                "a decorated function instead (see the data loading guide)",
            )
        elif method.method == RUN:
            self.runs.append(_Run(method, construction, var))
        else:
            self.plan.note(
                method.call,
                DISTRIBUTOR_USED,
                f"TorchDistributor.{method.method} has no @distributed counterpart: migrate it by hand",
            )

    # --- functions -----------------------------------------------------------------------------------------------

    def _check_target(self, run: _Run) -> None:
        if run.construction is None or run.construction.reading.config is None:
            run.blocked = True  # the settings' problems are noted where they are written
        target = run.method.target
        assert target is not None
        if target.code is not None:
            self.plan.note(target.node, target.code, target.problem or "")
            run.blocked = True
            return
        assert target.var is not None
        bindings = self.facts.bindings.get(target.var, [])
        if bindings and all(binding.string for binding in bindings):  # `train_file = "train.py"`: a script's path
            self.plan.note(target.node, SCRIPT, script_problem(target.var.name, bound=True))
            run.blocked = True
            return
        run.function = target.var
        problem, definition = self._definition(target.var)
        if problem is not None:
            self.plan.note(target.node, TARGET, problem)
            run.blocked = True
        run.definition = definition

    def _definition(self, var: Var) -> Tuple[Optional[str], Optional[Binding]]:
        """The function's one ``def``, or why there is no such thing."""
        bindings = self.facts.bindings.get(var, [])
        name = var.name
        if not bindings:
            return (
                f"{name} is not defined in this file (a %run notebook, or a cell air-migrate cannot read?): "
                "the decorator goes on its def, so migrate where it is defined"
            ), None
        if len(bindings) > 1:
            return (
                f"{name} is bound more than once in this file, so air-migrate cannot tell which function "
                "runs: keep one def"
            ), None
        binding = bindings[0]
        if binding.kind == IMPORT:
            return (
                f"{name} is imported ({binding.imported}): decorate it where it is defined, or call it from a "
                "module-level def here and run that"
            ), None
        if binding.kind == CLASS:
            return f"{name} is a class, not a function: run a module-level def that uses it", None
        if binding.kind != DEF:
            return f"{name} is not bound by a def here: run a module-level def", None
        function = binding.node
        assert isinstance(function, libcst.FunctionDef)
        if function.asynchronous is not None:
            return f"{name} is a coroutine function (async def): ranks run plain functions", None
        if any(_names_launcher(decorator.decorator) for decorator in function.decorators):
            return f"{name} is already decorated with distributed: call {name}.distributed(...) instead", None
        return None, binding

    def _group_by_function(self) -> Dict[Var, List[_Run]]:
        functions: Dict[Var, List[_Run]] = {}
        for run in self.runs:
            if run.function is not None:
                functions.setdefault(run.function, []).append(run)
        return functions

    def _check_function(self, function: Var, runs: List[_Run]) -> None:
        """One decorator serves every run of a function: all of them are rewritten the same way, or none is."""
        name = function.name
        run_calls = {run.method.call for run in runs}
        for use in self.facts.uses.get(function, []):
            if use.target_of in run_calls:
                continue
            if use.called:
                message = (
                    f"{name} is also called directly here: once decorated, {name}(...) raises; call "
                    f"{name}.func(...) to run the plain function, then run air-migrate again"
                )
            else:
                message = (
                    f"{name} is also used here, not only run by TorchDistributor: once decorated it is no "
                    f"longer a plain function; use {name}.func for that, then run air-migrate again"
                )
            self.plan.note(use.node, FUNCTION_USED, message)
            _block(runs)
        definition = next((run.definition for run in runs if run.definition is not None), None)
        if definition is not None and _mentions(self.facts.unparsed, name):
            defined = definition.node
            assert isinstance(defined, libcst.FunctionDef)
            self.plan.note(
                defined.name,
                FUNCTION_USED,
                f"{name} also appears in a cell or magic air-migrate cannot "
                "read, where the decorator could break it: check it, then migrate by hand",
            )
            _block(runs)
        configs = {
            run.construction.reading.config
            for run in runs
            if run.construction is not None and run.construction.reading.config is not None
        }
        if len(configs) > 1:
            shown = " and ".join(sorted(f"@distributed({config.settings()})" for config in configs))
            for run in runs:
                self.plan.note(
                    run.method.call,
                    CONFIGURATIONS,
                    f"{name} is run with different settings ({shown}), "
                    "and one decorator cannot give both: define one function per setting",
                )
            _block(runs)
        elif any(run.blocked for run in runs):
            for run in runs:
                if not run.blocked:
                    self.plan.note(
                        run.method.call,
                        CONFIGURATIONS,
                        f"{name} is also run where it cannot be "
                        "rewritten, and a decorated function cannot be run by TorchDistributor: this run "
                        "is left as it is too",
                    )
            _block(runs)

    def _launcher(self, converted: Dict[Var, List[_Run]], removable: Set[Construction]) -> Optional[_Launcher]:
        """How the decorator is named, or ``None`` when nothing is rewritten or ``distributed`` is taken (by
        something the rewrite does not take out: a distributor called ``distributed`` goes with its runs)."""
        if not converted:
            return None
        reusable = self._reusable_launchers()
        if reusable:
            return reusable[0]
        clashes = [
            b
            for b in self.facts.bindings.get(Var(DECORATOR), [])
            if not _is_launcher(b) and b.construction not in removable
        ]
        for binding in clashes:
            self.plan.note(
                binding.node,
                NAME_CLASH,
                f"`{DECORATOR}` is bound here to something else, and the "
                "rewrite of TorchDistributor needs it for @distributed: bind that to another name (e.g. "
                "`import torch.distributed as dist`), or add `from databricks.air import distributed as "
                "air_distributed` above the functions, then run air-migrate again",
            )
        return None if clashes else _Launcher(DECORATOR, f"from {NEW_MODULE} import {DECORATOR}", ())

    def _reusable_launchers(self) -> List[_Launcher]:
        """Existing module-level imports of the decorator (or of its module, as an alias), first one first."""
        found = []
        for var, bindings in self.facts.bindings.items():
            if var.scope is None and bindings and all(_is_launcher(b) and not b.guarded for b in bindings):
                found.append(_Launcher.reusing(bindings))
        return sorted(found, key=lambda launcher: launcher.bindings[0].where)

    # --- the rewrite ---------------------------------------------------------------------------------------------

    def _rewrite(self, runs: List[_Run], decorator: str) -> None:
        config = next(run.construction.reading.config for run in runs if run.construction is not None)
        assert config is not None
        definition = runs[0].definition
        assert definition is not None and isinstance(definition.node, libcst.FunctionDef)
        self.plan.decorators[definition.node] = f"{decorator}({config.decorator_arguments()})"
        self.where_defined[definition.node] = definition.where
        for run in runs:
            receiver = run.var.name if run.var is not None else "TorchDistributor(...)"
            self.plan.runs[run.method.call] = RunEdit(definition.var.name, receiver, run.method.value_used)
            self.decorated[run.method.call] = definition.node
            if run.var is None:  # TorchDistributor(...).run(fn): the constructor goes from the call
                self.plan.keep_comments(definition.node, comments_in(run.method.call.func))
            construction = run.construction
            if construction is not None and construction.reading.use_gpu is not None:
                names = self.plan.cpu.get(construction.reading.use_gpu)
                function = definition.var.name
                self.plan.cpu[construction.reading.use_gpu] = f"{names}, {function}" if names else function

    def _consumed_by_runs(self, converted: Dict[Var, List[_Run]]) -> List[Construction]:
        """The distributors assigned to a variable whose every use is a run that is rewritten."""
        rewritten = {run.method.call for runs in converted.values() for run in runs}
        found = []
        for construction in self.facts.constructions:
            if construction.holder is None or construction.assign is None or construction not in self.owned:
                continue
            uses = self.owned[construction]
            if uses and all(use.method is not None and use.method.call in rewritten for use in uses):
                found.append(construction)
        return found

    def _removable(self, converted: Dict[Var, List[_Run]]) -> Set[Construction]:
        """The distributors that go with their runs: those no cell or magic air-migrate cannot read mentions."""
        return {
            construction
            for construction in self._consumed_by_runs(converted)
            if not _mentions(self.facts.unparsed, construction.holder.name)  # type: ignore[union-attr]
        }

    def _remove_variables(self, converted: Dict[Var, List[_Run]], removable: Set[Construction]) -> Set[Construction]:
        """Take out each distributor variable whose every use was rewritten; return the constructions that go."""
        consumed = {
            run.construction
            for runs in converted.values()
            for run in runs
            if run.var is None and run.construction is not None
        }
        for construction in self._consumed_by_runs(converted):
            var = construction.holder
            assert var is not None and construction.assign is not None
            uses = self.owned[construction]
            if construction not in removable:
                self.plan.note(
                    construction.assign,
                    DISTRIBUTOR_USED,
                    f"{var.name} also appears in a cell or magic "
                    "air-migrate cannot read, so it is left as it is (and so is its import): remove it "
                    "if nothing there uses it",
                    severity=Severity.MANUAL,
                )
                continue
            self.plan.removed[construction.assign] = var.name
            consumed.add(construction)
            statement = construction.statement
            alone = statement is not None and len(statement.body) == 1  # the line goes, its comment too
            functions = sorted(
                {self.decorated[use.method.call] for use in uses if use.method is not None},
                key=lambda function: self.where_defined[function],
            )
            comments = comments_in(construction.assign)
            if alone:
                comments += comments_in(statement.trailing_whitespace)  # type: ignore[union-attr]
            self.plan.keep_comments(functions[0], comments)
        return consumed

    def _remove_imports(self, consumed: Set[Construction]) -> None:
        """Take out each import of TorchDistributor whose every use goes with the distributors rewritten, wherever
        it is (at module level, under ``if __name__ == "__main__":`` or ``try:``, in a function): left behind, it
        would fail with ModuleNotFoundError where Spark is not installed. One still used for something else stays,
        and that use is reported (``AM212``)."""
        for var, bindings in self.facts.bindings.items():
            if not any(_imports_torch_distributor(b) for b in bindings):
                continue
            if not all(_imports_torch_distributor(b) for b in bindings):
                continue
            if _mentions(self.facts.unparsed, var.name):
                continue
            if all(use.construction in consumed for use in self.facts.uses.get(var, [])):
                for binding in bindings:
                    assert binding.alias is not None
                    self.plan.imports.setdefault(binding.node, ImportEdit()).drop.append(binding.alias)

    def _place_imports(self, converted: Dict[Var, List[_Run]], launcher: _Launcher) -> None:
        """Make the decorator's name bound at every decorated function: after the last restart before it."""
        available = [binding.where for binding in launcher.bindings]
        definitions = sorted(
            (runs[0].definition for runs in converted.values() if runs[0].definition is not None),
            key=lambda binding: binding.where,
        )
        for definition in definitions:
            if not any(self._in_effect(where, definition.where) for where in available):
                available.append(self._import_for(definition, launcher))

    def _import_for(self, definition: Binding, launcher: _Launcher) -> Where:
        """Plan an import in effect at ``definition``: joined to a ``databricks.air`` import, in place of (or next
        to) the ``TorchDistributor`` import, or else above the function; return where it is."""
        if launcher.expression == DECORATOR:
            for binding in self._air_from_imports():
                if self._in_effect(binding.where, definition.where):
                    self.plan.imports.setdefault(binding.node, ImportEdit()).add_name = DECORATOR
                    return binding.where
        for binding in self._torch_distributor_imports():
            edit = self.plan.imports.get(binding.node, ImportEdit())
            if edit.replacement is None and edit.add_after is None and self._in_effect(binding.where, definition.where):
                if len(edit.drop) == len(_aliases(binding.node)):
                    edit.replacement = launcher.statement
                else:
                    edit.add_after = launcher.statement
                self.plan.imports[binding.node] = edit
                return binding.where
        function = definition.node
        assert isinstance(function, libcst.FunctionDef)
        self.plan.before[function] = launcher.statement
        return definition.where

    def _torch_distributor_imports(self) -> List[Binding]:
        """The module-level imports of TorchDistributor (or its module), in file order: the new import goes next to
        one of them, in its place when it goes."""
        return sorted(
            (
                binding
                for var, bindings in self.facts.bindings.items()
                if var.scope is None
                for binding in bindings
                if _imports_torch_distributor(binding) and not binding.guarded
            ),
            key=lambda binding: binding.where,
        )

    def _air_from_imports(self) -> List[Binding]:
        """Module-level ``from databricks.air import ...`` statements, which can take one more name."""
        found: Dict[libcst.CSTNode, Binding] = {}
        for var, bindings in self.facts.bindings.items():
            for binding in bindings:
                module = (binding.imported or "").rsplit(".", 1)[0]
                if (
                    var.scope is None
                    and binding.kind == IMPORT
                    and isinstance(binding.node, libcst.ImportFrom)
                    and module == NEW_MODULE
                    and not binding.guarded
                ):
                    found.setdefault(binding.node, binding)
        return sorted(found.values(), key=lambda binding: binding.where)

    def _in_effect(self, where: Where, at: Where) -> bool:
        """A name bound at ``where`` is still bound at ``at``: before it, with no restart in between."""
        return where < at and not any(where < restart < at for restart in self.facts.restarts)


def _uses_just_after(
    bindings: Sequence[Binding], uses: Sequence[Use]
) -> Optional[List[Tuple[Construction, List[Use]]]]:
    """Each binding with the uses in the statement just after it, when every use is in one and no other binding
    lies there (``d = TorchDistributor(2)`` then ``d.run(f)`` in an ``if __name__ == "__main__":`` block, and
    again in a ``try:`` block); ``None`` otherwise."""
    owned: List[Tuple[Construction, List[Use]]] = []
    claimed = 0
    for binding in bindings:
        span = binding.next_span
        if span is not None and any(span[0] <= other.where <= span[1] for other in bindings if other is not binding):
            return None
        mine = [use for use in uses if binding.just_before(use.where)]
        claimed += len(mine)
        owned.append((binding.construction, mine))  # type: ignore[arg-type]
    return owned if claimed == len(uses) else None


def _block(runs: Sequence[_Run]) -> None:
    for run in runs:
        run.blocked = True


def _is_launcher(binding: Binding) -> bool:
    if binding.kind != IMPORT:
        return False
    imported = binding.imported or ""
    if isinstance(binding.node, libcst.ImportFrom):
        return imported in LAUNCHERS
    return imported in LAUNCHER_MODULES and binding.alias is not None and binding.alias.asname is not None


def _imports_torch_distributor(binding: Binding) -> bool:
    return binding.kind == IMPORT and binding.imported in _TORCH_DISTRIBUTOR_IMPORTS


def _names_launcher(expression: libcst.BaseExpression) -> bool:
    """``@distributed``, ``@distributed(...)``, ``@air.distributed(...)``: spelled like the decorator."""
    if isinstance(expression, libcst.Call):
        expression = expression.func
    if isinstance(expression, libcst.Attribute):
        return expression.attr.value == DECORATOR
    return isinstance(expression, libcst.Name) and expression.value == DECORATOR


def _aliases(node: libcst.CSTNode) -> Sequence[libcst.ImportAlias]:
    names = getattr(node, "names", ())
    return () if isinstance(names, libcst.ImportStar) else names


def _mentions(texts: Sequence[str], name: str) -> bool:
    word = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    return any(word.search(text) for text in texts)
