"""Which calls the keyword and type rules work on, shared by AM102, AM103 and AM108.

A target is ``distributed(...)`` or ``ray_launch(...)`` of ``serverless_gpu`` or ``databricks.air`` (as a decorator
or a plain call, resolved by scope through any import form or alias, never by spelling), or any
``<function>.with_overrides(...)``. Each package offers them from its top level and from the submodules that define
them (:data:`LAUNCHERS`: ``serverless_gpu.launcher.distributed``, ``serverless_gpu.ray.ray_launch``...), so ``from
serverless_gpu.ray import ray_launch`` and ``import serverless_gpu.launcher as launcher`` reach them too.
``torch.distributed`` and a local function called ``distributed`` are not targets.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import Any, Callable, Collection, Dict, FrozenSet, Optional, Set

import libcst
from libcst.metadata import QualifiedName, ScopeProvider

OLD_MODULE = "serverless_gpu"
NEW_MODULE = "databricks.air"
LAUNCHER_MODULES = {"distributed": ("", ".launcher"), "ray_launch": ("", ".ray")}
"""Where each launcher is defined or exported, below either package."""
OLD_ONLY_MODULES = (".api",)
"""Old module paths with both launchers that ``databricks.air`` has no module for (:mod:`serverless_gpu.api`)."""
LAUNCHERS = frozenset(
    [
        f"{package}{module}.{name}"
        for package in (OLD_MODULE, NEW_MODULE)
        for name, modules in LAUNCHER_MODULES.items()
        for module in modules
    ]
    + [f"{OLD_MODULE}{module}.{name}" for module in OLD_ONLY_MODULES for name in LAUNCHER_MODULES]
)
"""The qualified names of the launchers, e.g. ``serverless_gpu.launcher.distributed``."""
PACKAGES = (OLD_MODULE, NEW_MODULE)
TYPE_KEYWORDS = ("accelerator_type", "gpu_type")
"""The keywords that carry a GPU or accelerator type, new name first."""
COUNT_KEYWORDS = ("num_accelerators", "gpus")
"""The keywords that carry the count, new name first."""

MetadataGetter = Callable[..., Any]
"""``Rule.get_metadata``: ``(provider, node, default)``."""


def qualified_names(get_metadata: MetadataGetter, node: libcst.CSTNode) -> Collection[QualifiedName]:
    """What a name or dotted name refers to, by scope (asked of the scope directly: libcst's
    ``QualifiedNameProvider`` would first walk the whole cell to compute the same for every node)."""
    scope = get_metadata(ScopeProvider, node, None)
    return scope.get_qualified_names_for(node) if scope is not None else ()


_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+(?:serverless_gpu|databricks\.air)[ \t]+import[ \t]*\*", re.MULTILINE)


def is_launch_call(get_metadata: MetadataGetter, call: libcst.Call, text: str = "") -> bool:
    """True for ``distributed(...)``, ``ray_launch(...)`` (either package) and ``x.with_overrides(...)``.

    ``text`` is the cell with the imports of earlier cells: when it has ``from serverless_gpu import *`` (or
    ``databricks.air``'s), a bare ``distributed``/``ray_launch`` that nothing else in scope binds is that package's.
    """
    if isinstance(call.func, libcst.Attribute) and call.func.attr.value == "with_overrides":
        return True
    if not isinstance(call.func, (libcst.Name, libcst.Attribute)):
        return False
    if any(name.name in LAUNCHERS for name in qualified_names(get_metadata, call.func)):
        return True
    return (
        isinstance(call.func, libcst.Name)
        and call.func.value in ("distributed", "ray_launch")
        and _STAR_IMPORT.search(text) is not None
        and _unbound(get_metadata, call.func)
    )


def _unbound(get_metadata: MetadataGetter, name: libcst.Name) -> bool:
    scope = get_metadata(ScopeProvider, name, None)
    return scope is not None and not scope[name.value]


@functools.lru_cache(maxsize=4)  # the rules of one cell ask for the same text in turn
def package_names(text: str) -> FrozenSet[str]:
    """Every name ``text`` binds by importing from ``serverless_gpu`` or ``databricks`` (aliases included), found
    with :mod:`ast` (fast): a statement that mentions one of them may call a launcher under another spelling."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return frozenset()
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                alias.asname or alias.name.split(".")[0]
                for alias in node.names
                if alias.name.split(".")[0] in _PACKAGE_ROOTS
            )
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in _PACKAGE_ROOTS:
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
    return frozenset(names)


_PACKAGE_ROOTS = (OLD_MODULE, NEW_MODULE.split(".")[0])


def launch_words(text: str) -> FrozenSet[str]:
    """What a statement holds when it may contain a launch call (:func:`is_launch_call`) or a GPU type: the
    launchers' own names, ``with_overrides``, the keywords, and every name imported from either package."""
    return frozenset(
        (
            OLD_MODULE,
            "databricks",
            "distributed",
            "ray_launch",
            "with_overrides",
            "GPUType",
            *TYPE_KEYWORDS,
            *COUNT_KEYWORDS,
        )
    ) | package_names(text)


def keyword_args(call: libcst.Call) -> Dict[str, libcst.Arg]:
    """The call's keyword arguments by name."""
    return {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}


def type_arg(call: libcst.Call) -> Optional[libcst.Arg]:
    """The argument that gives the type (``accelerator_type=`` or the old ``gpu_type=``), if any."""
    keywords = keyword_args(call)
    return next((keywords[name] for name in TYPE_KEYWORDS if name in keywords), None)


def count_arg(call: libcst.Call) -> Optional[libcst.Arg]:
    """The argument that gives the count (``num_accelerators=`` or the old ``gpus=``), if any."""
    keywords = keyword_args(call)
    return next((keywords[name] for name in COUNT_KEYWORDS if name in keywords), None)


def literal_count(call: libcst.Call, resolve: Optional[Callable[[libcst.Name], Optional[int]]] = None) -> Optional[int]:
    """The count (``num_accelerators=`` or ``gpus=``) when it is an integer literal, or a name ``resolve`` knows to
    be bound to one (:func:`air_migrate.rules.bound_names.int_value`), else ``None``."""
    arg = count_arg(call)
    if arg is None:
        return None
    if isinstance(arg.value, libcst.Integer):
        return int(arg.value.evaluated_value)
    if isinstance(arg.value, libcst.Name) and resolve is not None:
        return resolve(arg.value)
    return None


def package_callee(get_metadata: MetadataGetter, call: libcst.Call) -> Optional[str]:
    """The qualified name of what ``call`` calls when it comes from either package and is not a launcher (say
    ``serverless_gpu.launcher.DistributedFunction``), else ``None``."""
    if not isinstance(call.func, (libcst.Name, libcst.Attribute)):
        return None
    names = {name.name for name in qualified_names(get_metadata, call.func)}
    if not names or names & LAUNCHERS:
        return None
    ours = [name for name in names if any(name.startswith(package + ".") for package in PACKAGES)]
    return sorted(ours)[0] if ours and len(ours) == len(names) else None
