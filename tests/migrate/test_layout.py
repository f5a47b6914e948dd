"""The shape of ``air_migrate``: no import circle, the rules import only their contract, the driver no rule.

Imports are read from the source with :mod:`ast`: an import inside a function counts (it runs too, only later), one
under ``if TYPE_CHECKING:`` does not. Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so an
import of a module counts as an import of every package above it too, except the packages above the importing module
itself (they are already being imported when it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import air_migrate

PACKAGE = "air_migrate"
ROOT = Path(air_migrate.__file__).parent


def modules_of(root: Path) -> Dict[str, Path]:
    """Every module of the package in ``root`` by its dotted name (a package by its own name, for its
    ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([PACKAGE, *parts])] = path
    return found


MODULES = modules_of(ROOT)


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


def _resolve(module: str, node: ast.stmt, modules: Dict[str, Path] = MODULES) -> List[str]:
    """The package's modules an import statement in ``module`` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == PACKAGE]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base.split(".")[0] != PACKAGE:
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


def _ancestors(module: str) -> List[str]:
    parts = module.split(".")
    return [".".join(parts[:index]) for index in range(1, len(parts))]


def import_graph(modules: Dict[str, Path] = MODULES) -> Dict[str, Set[str]]:
    """Module -> the package's modules that importing it runs directly."""
    graph: Dict[str, Set[str]] = {}
    for module, path in modules.items():
        own = set(_ancestors(module))
        edges: Set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            for target in _resolve(module, node, modules):
                edges.update(m for m in [*_ancestors(target), target] if m in modules and m not in own)
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
                return path[path.index(target):] + [target]
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


def test_there_is_no_import_circle() -> None:
    circle = find_circle(import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_rules_import_only_their_contract_the_sources_and_each_other() -> None:
    allowed = {f"{PACKAGE}.rule_base", f"{PACKAGE}.sources", PACKAGE}
    for module, targets in import_graph().items():
        if module.startswith(f"{PACKAGE}.rules"):
            outside = {t for t in targets if not t.startswith(f"{PACKAGE}.rules") and t not in allowed}
            assert not outside, f"{module} imports {sorted(outside)}"


def test_the_driver_imports_no_rule() -> None:
    """Only the command line's registry (``codes``) loads the rules; the engine knows none of them."""
    graph = import_graph()
    for module in ("engine", "cell_pass", "cell_context", "todo_markers", "runner", "rule_base", "syntax_errors"):
        reached = _reachable(graph, f"{PACKAGE}.{module}")
        assert not [m for m in reached if m.startswith(f"{PACKAGE}.rules")], (module, sorted(reached))


def _reachable(graph: Dict[str, Set[str]], start: str) -> Set[str]:
    seen: Set[str] = set()
    stack = [start]
    while stack:
        for target in graph[stack.pop()]:
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_the_checker_sees_imports_in_functions_and_the_packages_an_import_runs(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "results.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import air_migrate.marker\n",
        "rules/__init__.py": "from air_migrate.rules import one\n",
        "rules/base.py": "",
        "rules/one.py": "from air_migrate.rules.base import x\nfrom air_migrate.marker import y\n",
        "marker.py": "def f():\n    from air_migrate.rules.base import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(modules_of(tmp_path))
    assert graph["air_migrate.results"] == set()  # under TYPE_CHECKING
    assert graph["air_migrate.rules.one"] == {"air_migrate.rules.base", "air_migrate.marker"}
    # marker -> rules.base runs rules/__init__, which imports rules.one, which imports marker.
    assert find_circle(graph) == ["air_migrate.marker", "air_migrate.rules", "air_migrate.rules.one",
                                  "air_migrate.marker"]
