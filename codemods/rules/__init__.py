"""``air-migrate``'s rules: one module (or package) per rule, each registering itself in :data:`REGISTRY`.

A libcst rule (:class:`Rule`) transforms one cell's module: it returns new nodes for what it changes (everything
else is printed back byte for byte by libcst) and reports each change, and each thing a person must look at, as a
:class:`Finding` through :meth:`Rule.report`. A line rule (:class:`LineRule`) looks at the raw lines of a cell
(magics, ``# MAGIC`` lines) that libcst never sees. Each rule's docstring says which of its changes are safe and
which are flagged for review. The contract itself is :mod:`air_migrate.rule_base`.

* ``am101_imports`` to ``am111_run_magics``: the ``serverless_gpu`` rules (AM101 to AM111), with what they share:
  :mod:`~air_migrate.rules.targets` (which calls are launch calls), :mod:`~air_migrate.rules.accelerator_types`
  (old GPU models to accelerator types), :mod:`~air_migrate.rules.bound_names` (a count or type given by a name
  bound to a literal, across cells) and :mod:`~air_migrate.rules.guards` (which blocks make an import a guarded
  one);
* :mod:`~air_migrate.rules.torch_distributor`: Spark's ``TorchDistributor`` (AM201 to AM217).

Importing this package registers every rule; only :mod:`air_migrate.codes` does, for the command line.
"""

from air_migrate.rule_base import REGISTRY, Finding, LineRule, Rule, register
from air_migrate.rules import (  # noqa: F401  (each registers its rule)
    am101_imports,
    am102_keywords,
    am103_gpu_types,
    am108_gpu_type_members,
    am110_pip_installs,
    am111_run_magics,
    torch_distributor,
)

__all__ = ["REGISTRY", "Finding", "LineRule", "Rule", "register"]
