"""AM217: Spark session setup in a file that uses ``TorchDistributor`` is reported, never deleted.

``TorchDistributor`` needs an active Spark session; ``@distributed`` does not. So in a file (or notebook) that mentions
``TorchDistributor``, this rule points at the Spark set-up a person may want to remove once the runs are migrated:

* ``SparkSession.builder...getOrCreate()``, ``SparkSession`` of ``pyspark.sql`` however imported (resolved by scope);
* ``spark.conf.set(...)`` on Databricks' own ``spark`` (a name no cell binds), or on any module-level name assigned a
  session built that way, in any cell.

Other code of the notebook may still use Spark (to read data, say), which air-migrate cannot judge: these lines are
reported as ``manual`` and left as they are. Once no ``TorchDistributor`` is left, the file is not looked at again,
so a migrated notebook gets no report.

Safety: it changes nothing.
"""

from __future__ import annotations

from typing import Collection, Optional, Set

import libcst
from libcst.metadata import GlobalScope, PositionProvider, ScopeProvider

from air_migrate.rules.torch_distributor.codes import SPARK_SETUP
from air_migrate.rules.torch_distributor.file_scan import mentions_torch_distributor
from air_migrate.rule_base import FileScan, Rule, register
from air_migrate.rules.targets import qualified_names
from air_migrate.sources import SourceFile

SESSION_CLASSES = frozenset({"pyspark.sql.SparkSession", "pyspark.sql.session.SparkSession"})
DATABRICKS_SESSION = "spark"
"""The session Databricks puts in every notebook."""
_ACTIVE = "am217_active"
_SESSIONS = "am217_sessions"


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
        if not mentions_torch_distributor(source):
            return None
        wanted = frozenset(cell.number for cell in source.cells
                           if cell.text is not None and ("getOrCreate" in cell.text or ".conf" in cell.text))
        return FileScan(wanted, scratch={_ACTIVE: True})

    def survey(self, module: libcst.Module) -> None:
        if not self.context.file.get(_ACTIVE):
            return
        sessions: Set[str] = self.context.file.setdefault(_SESSIONS, set())
        for statement in module.body[len(self.context.prefix):]:
            if not isinstance(statement, libcst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, libcst.Assign) and self._builds_session(small.value):
                    sessions.update(target.target.value for target in small.targets
                                    if isinstance(target.target, libcst.Name))

    def statement_words(self) -> Optional[Collection[str]]:
        return None if self.context.file.get(_ACTIVE) else ()

    def visit_Call(self, node: libcst.Call) -> None:
        if not self.context.file.get(_ACTIVE):
            return
        if self._builds_session(node):
            self.report(node, "Spark session setup: @distributed needs no Spark session, so this is only needed if "
                        "other code here uses Spark; it is left as it is: remove it if nothing else does",
                        attention=True)
        elif self._sets_conf(node):
            self.report(node, "Spark configuration: it configures the Spark session TorchDistributor ran on, which "
                        "@distributed does not use; it is left as it is: remove it if nothing else here uses Spark",
                        attention=True)

    def _builds_session(self, node: libcst.BaseExpression) -> bool:
        """``SparkSession.builder[...].getOrCreate()``."""
        if not (isinstance(node, libcst.Call) and isinstance(node.func, libcst.Attribute)
                and node.func.attr.value == "getOrCreate"):
            return False
        base: libcst.BaseExpression = node.func.value
        while True:
            if isinstance(base, libcst.Call):
                base = base.func
            elif isinstance(base, libcst.Attribute) and base.attr.value != "builder":
                base = base.value
            else:
                break
        if not isinstance(base, libcst.Attribute):
            return False
        names = qualified_names(self.get_metadata, base.value)
        return bool(names) and all(name.name in SESSION_CLASSES for name in names)

    def _sets_conf(self, node: libcst.Call) -> bool:
        """``session.conf.set(...)`` on Databricks' ``spark`` or on a session this file builds."""
        func = node.func
        if not (isinstance(func, libcst.Attribute) and func.attr.value == "set"
                and isinstance(func.value, libcst.Attribute) and func.value.attr.value == "conf"
                and isinstance(func.value.value, libcst.Name)):
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
