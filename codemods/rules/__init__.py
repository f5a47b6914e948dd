"""``air-migrate``'s rules: one module per rule code, each registering itself in :data:`REGISTRY`.

A libcst rule (:class:`Rule`) transforms one cell's module: it returns new nodes for what it changes (everything
else is printed back byte for byte by libcst) and reports each change, and each thing a person must look at, as a
:class:`Finding` through :meth:`Rule.report`. A line rule (:class:`LineRule`) looks at the raw lines of a cell
(magics, ``# MAGIC`` lines) that libcst never sees. Each rule's docstring says which of its changes are safe and
which are flagged for review.
"""

from air_migrate.rules.base import REGISTRY, Finding, LineRule, Rule, register
from air_migrate.rules import (  # noqa: F401  (each registers its rule)
    am101_imports,
    am102_keywords,
    am103_gpu_types,
    am108_gpu_type_members,
    am110_pip_installs,
    am111_run_magics,
    am201_torch_distributor,
    am217_spark_setup,
)

__all__ = ["REGISTRY", "Finding", "LineRule", "Rule", "register"]
