"""Griffe extension: API pages show signatures as users write and read them.

* ``databricks.air.distributed``, ``ray_init`` and ``ray_launch`` are, in the package, lazy wrappers taking
  ``(*args, **kwargs)`` that import the real function on first use. Users write ``from databricks.air import
  distributed``, so the pages document them under that path, with the real function's signature and docstring:
  each wrapper is replaced by an alias of the function it forwards to (:data:`PUBLIC_NAMES`).
* A default that names a constant (``timeout=DEFAULT_TIMEOUT``) is shown as the constant's value (``10800``),
  followed through modules (``DEFAULT_TIMEOUT = _validation.DEFAULT_TIMEOUT``). A default that is a sentinel
  (``_UNSET = object()``) is shown as the label :data:`SENTINELS` gives it; one without a label fails the build, so
  that no page shows a private name such as ``_UNSET``.
"""

from __future__ import annotations

from typing import Any, Iterator

import griffe

PUBLIC_NAMES = {
    "distributed": "databricks.air.launcher.distributed",
    "ray_init": "databricks.air.ray.ray_init",
    "ray_launch": "databricks.air.ray.ray_launch",
}
"""Names of ``databricks.air`` and the functions their lazy wrappers forward to."""

SENTINELS = {
    "databricks.air.launcher._UNSET": "<unchanged>",
}
"""Sentinel defaults and what a page shows for them (``with_overrides(timeout=...)``: omitted keeps the value)."""


class ApiSignatures(griffe.Extension):
    """Document the top-level functions under ``databricks.air`` and show defaults by value."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.path != "databricks" or "air" not in pkg.members:
            return
        air = pkg.members["air"]
        for name, target in PUBLIC_NAMES.items():
            air.set_member(name, griffe.Alias(name, target, parent=air))  # type: ignore[arg-type]
        for function in _functions(pkg):
            for parameter in function.parameters:
                if isinstance(parameter.default, (griffe.ExprName, griffe.ExprAttribute)):
                    parameter.default = shown_default(parameter.default, loader, f"{function.path}({parameter.name})")


def shown_default(default: Any, loader: griffe.GriffeLoader, where: str) -> Any:
    """What a page shows for ``default``: a named constant as its value, a sentinel as its label; else as written.

    Only names (``DEFAULT_TIMEOUT``, ``_validation.DEFAULT_TIMEOUT``) are followed, to the module attribute they
    name; a name of a class or function, and any other expression (``()``, ``8 * 1024``), is shown as written.
    """
    seen = set()
    value = default
    while isinstance(value, (griffe.ExprName, griffe.ExprAttribute)):
        path = value.canonical_path
        if path in SENTINELS:
            return SENTINELS[path]
        if path in seen:
            break
        seen.add(path)
        try:
            target = loader.modules_collection.get_member(path)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return default  # a name from outside the package (``math.inf``): as written
        if not target.is_attribute:
            return default  # a class or a function
        if isinstance(target.value, griffe.ExprCall) and str(target.value.function) == "object":
            raise ValueError(f"{where}: the default {default!s} is a sentinel; give it a label in SENTINELS")
        value = target.value
    return default if value is None else value


def _functions(obj: griffe.Object) -> Iterator[griffe.Function]:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_function:
            yield member  # type: ignore[misc]
        elif member.is_module or member.is_class:
            yield from _functions(member)  # type: ignore[arg-type]
