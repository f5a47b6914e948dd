"""The import graph of a package, read from its sources with :mod:`ast`, and the circles in it.

An import inside a function counts (it runs too, only later); one under ``if TYPE_CHECKING:`` does not. Importing
``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so an import of a module counts as an import of every
package above it too, except the packages above the importing module itself (they are already being imported when it
runs), unless the import takes a name from one of those. Used by ``tests/test_architecture.py`` (``databricks.air``) and ``tests/migrate/test_layout.py``
(``air_migrate``).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple


def modules_of(root: Path, package: str) -> Dict[str, Path]:
    """Every module of ``package``, whose sources are in ``root``, by its dotted name (a package by its own name,
    for its ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.stmt]:
    """Every import statement under ``node``, at any depth, except those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.stmt]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _import_nodes(node)


def resolve(module: str, node: ast.stmt, modules: Dict[str, Path], package: str) -> List[str]:
    """The package's modules an import statement in ``module`` names (``package`` itself for a name that its
    ``__init__`` or a package's defines)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if _within(alias.name, package)]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if not _within(base, package):
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def _ancestors(module: str) -> List[str]:
    parts = module.split(".")
    return [".".join(parts[:index]) for index in range(1, len(parts))]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports_of(module: str, modules: Dict[str, Path], package: str) -> Iterator[Tuple[ast.stmt, str]]:
    """Each import statement of ``module`` with each of the package's modules it names."""
    path = modules[module]
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        for target in resolve(module, node, modules, package):
            yield node, target


def import_graph(modules: Dict[str, Path], package: str) -> Dict[str, Set[str]]:
    """Module -> the package's modules that importing it runs directly."""
    graph: Dict[str, Set[str]] = {}
    for module in modules:
        own = set(_ancestors(module))
        edges: Set[str] = set()
        for _, target in imports_of(module, modules, package):
            # The packages above the target run first, except those already running; the target itself runs
            # whatever it is (a name taken from a package above this module is a circle if that package is still
            # being imported).
            edges.update(m for m in _ancestors(target) if m in modules and m not in own)
            if target in modules:
                edges.add(target)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_circle(graph: Dict[str, Set[str]]) -> Optional[List[str]]:
    """One import circle (its modules in import order, the first again at the end), or ``None``."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(module: str) -> Optional[List[str]]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None
