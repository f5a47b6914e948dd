"""``air-migrate``'s rules: one module per rule code, each registering itself in :data:`REGISTRY`.

A rule is a libcst transformer over one cell's module. It returns new nodes for what it changes (everything else
is printed back byte for byte by libcst) and reports each change, and each thing a person must look at, as a
:class:`Finding` through :meth:`Rule.report`.
"""

from air_migrate.rules.base import REGISTRY, Finding, Rule, register
from air_migrate.rules import am101_imports, am102_keywords, am103_gpu_types  # noqa: F401  (each registers its rule)

__all__ = ["REGISTRY", "Finding", "Rule", "register"]
