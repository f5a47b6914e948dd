"""AM217: Spark session setup in a file that uses ``TorchDistributor`` is reported, never deleted.

``TorchDistributor`` needs an active Spark session; ``@distributed`` does not. So in a file (or notebook) that mentions
``TorchDistributor``, this rule points at the Spark set-up a person may want to remove once the runs are migrated:

* ``SparkSession.builder...getOrCreate()``, ``SparkSession`` of ``pyspark.sql`` however imported (resolved by scope),
  also when the builder is kept in a variable first (``builder = SparkSession.builder.appName("x")``, then
  ``spark = builder.getOrCreate()``, in the same function or at module level in any earlier cell);
* ``spark.conf.set(...)`` on Databricks' own ``spark`` (a name no cell binds), or on any module-level name assigned a
  session built that way, in any cell.

Other code of the notebook may still use Spark (to read data, say), which air-migrate cannot judge: these lines are
reported as ``manual`` and left as they are. A write that rewrites the runs leaves a ``# TODO(air-migrate AM217)``
marker above each (:mod:`air_migrate.todo_markers`), which keeps it reported until a person decides. A file that
only imports ``TorchDistributor`` (an unused import beside a Spark job) has nothing to migrate: its Spark code is
not reported.

Safety: it changes nothing.
"""

from __future__ import annotations

from typing import Collection, Optional, Set

import libcst
from libcst.metadata import Assignment, GlobalScope, PositionProvider, ScopeProvider

from air_migrate.rules.torch_distributor.codes import SPARK_SETUP
from air_migrate.rules.torch_distributor.file_scan import uses_torch_distributor
from air_migrate.rule_base import CellContext, FileScan, Rule, Severity, register
from air_migrate.rules.targets import qualified_names
from air_migrate.sources import SourceFile

SESSION_CLASSES = frozenset({"pyspark.sql.SparkSession", "pyspark.sql.session.SparkSession"})
DATABRICKS_SESSION = "spark"
"""The session Databricks puts in every notebook."""
_ACTIVE = "am217_active"
_SESSIONS = "am217_sessions"
_BUILDERS = "am217_builders"
"""Module-level names bound to a session builder, across cells."""


@register
class SparkSetupRule(Rule):
    CODE = SPARK_SETUP
    DESCRIPTION = (
        "reported: Spark session setup (SparkSession.builder...getOrCreate(), spark.conf.set(...)) in a file that "
        "uses TorchDistributor, which @distributed does not need; never deleted"
    )
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider)

    @classmethod
    def scan_file(cls, source: SourceFile) -> Optional[FileScan]:
        if not uses_torch_distributor(source):
            return None  # nothing to migrate (at most an unused import): the Spark code is no item of ours
        wanted = frozenset(
            cell.number
            for cell in source.cells
            if cell.text is not None and any(word in cell.text for word in ("getOrCreate", ".conf", ".builder"))
        )
        return FileScan(wanted, scratch={_ACTIVE: True})

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__(context)
        self._builder_names: Set[libcst.Name] = set()
        """The names this cell assigns a session builder (``builder = SparkSession.builder...``), as written."""

    def survey(self, module: libcst.Module) -> None:
        if not self.context.file.get(_ACTIVE):
            return
        if ".builder" in (self.context.text or module.code):
            module.visit(_BuilderAssignments(self))
        sessions: Set[str] = self.context.file.setdefault(_SESSIONS, set())
        for statement in module.body[len(self.context.prefix) :]:
            if not isinstance(statement, libcst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, libcst.Assign) and self._builds_session(small.value):
                    sessions.update(
                        target.target.value for target in small.targets if isinstance(target.target, libcst.Name)
                    )

    def record_builder(self, target: libcst.Name) -> None:
        """``target = <a session builder>``, met in the order the cell is written."""
        self._builder_names.add(target)
        scope = self.get_metadata(ScopeProvider, target, None)
        if isinstance(scope, GlobalScope):
            self.context.file.setdefault(_BUILDERS, set()).add(target.value)

    def statement_words(self) -> Optional[Collection[str]]:
        return None if self.context.file.get(_ACTIVE) else ()

    def visit_Call(self, node: libcst.Call) -> None:
        if not self.context.file.get(_ACTIVE):
            return
        if self._builds_session(node):
            self.report(
                node,
                "Spark session setup: @distributed needs no Spark session, so this is only needed if "
                "other code here uses Spark; it is left as it is: remove it if nothing else does",
                severity=Severity.MANUAL,
                lasting=True,
            )
        elif self._sets_conf(node):
            self.report(
                node,
                "Spark configuration: it configures the Spark session TorchDistributor ran on, which "
                "@distributed does not use; it is left as it is: remove it if nothing else here uses Spark",
                severity=Severity.MANUAL,
                lasting=True,
            )

    def _builds_session(self, node: libcst.BaseExpression) -> bool:
        """``SparkSession.builder[...].getOrCreate()``, or ``builder[...].getOrCreate()`` on a builder variable."""
        return (
            isinstance(node, libcst.Call)
            and isinstance(node.func, libcst.Attribute)
            and node.func.attr.value == "getOrCreate"
            and self.is_builder(node.func.value)
        )

    def is_builder(self, node: libcst.BaseExpression) -> bool:
        """``SparkSession.builder``, or a variable holding a builder, with any calls and attributes after it."""
        base = node
        while True:
            if isinstance(base, libcst.Call):
                base = base.func
            elif isinstance(base, libcst.Attribute) and base.attr.value != "builder":
                base = base.value
            else:
                break
        if isinstance(base, libcst.Name):
            return self._holds_builder(base)
        if not isinstance(base, libcst.Attribute):
            return False
        names = qualified_names(self.get_metadata, base.value)
        return bool(names) and all(name.name in SESSION_CLASSES for name in names)

    def _holds_builder(self, name: libcst.Name) -> bool:
        """``name`` reads a variable bound to a builder: in this cell (by scope), or at module level earlier."""
        scope = self.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return False
        bindings = [binding for binding in scope[name.value] if isinstance(binding, Assignment)]
        if bindings:  # bound in this cell (`builder = builder.config(...)` rebinds it): one of them is a builder
            return any(binding.node in self._builder_names for binding in bindings)
        return name.value in self.context.file.get(_BUILDERS, ())  # a module-level name of an earlier cell

    def _sets_conf(self, node: libcst.Call) -> bool:
        """``session.conf.set(...)`` on Databricks' ``spark`` or on a session this file builds."""
        func = node.func
        if not (
            isinstance(func, libcst.Attribute)
            and func.attr.value == "set"
            and isinstance(func.value, libcst.Attribute)
            and func.value.attr.value == "conf"
            and isinstance(func.value.value, libcst.Name)
        ):
            return False
        name = func.value.value
        if name.value in self.context.file.get(_SESSIONS, ()):
            return True
        if name.value != DATABRICKS_SESSION:
            return False
        scope = self.get_metadata(ScopeProvider, name, None)
        while scope is not None and not isinstance(scope, GlobalScope):
            if name.value in scope.assignments:
                return False  # a local `spark`: not the notebook's session
            scope = scope.parent
        return scope is None or name.value not in scope.assignments


class _BuilderAssignments(libcst.CSTVisitor):
    """Finds, in the order they are written, the assignments of a session builder to a plain name."""

    def __init__(self, rule: SparkSetupRule) -> None:
        super().__init__()
        self._rule = rule

    def visit_Assign(self, node: libcst.Assign) -> None:
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0].target, libcst.Name)
            and self._rule.is_builder(node.value)
        ):
            self._rule.record_builder(node.targets[0].target)

    def visit_AnnAssign(self, node: libcst.AnnAssign) -> None:
        if isinstance(node.target, libcst.Name) and node.value is not None and self._rule.is_builder(node.value):
            self._rule.record_builder(node.target)
