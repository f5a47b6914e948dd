"""The shape of ``air_migrate``: no import circle, the rules import only their contract, the driver no rule.

Imports are read from the source (see ``tests/import_graph.py`` for what counts as an import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Set

from import_graph import find_circle, modules_of
from import_graph import import_graph as package_import_graph

import air_migrate

PACKAGE = "air_migrate"
ROOT = Path(air_migrate.__file__).parent


MODULES = modules_of(ROOT, PACKAGE)


def import_graph(modules: Dict[str, Path] = MODULES) -> Dict[str, Set[str]]:
    return package_import_graph(modules, PACKAGE)


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
    graph = import_graph(modules_of(tmp_path, PACKAGE))
    assert graph["air_migrate.results"] == set()  # under TYPE_CHECKING
    assert graph["air_migrate.rules.one"] == {"air_migrate.rules.base", "air_migrate.marker"}
    # marker -> rules.base runs rules/__init__, which imports rules.one, which imports marker.
    assert find_circle(graph) == [
        "air_migrate.marker",
        "air_migrate.rules",
        "air_migrate.rules.one",
        "air_migrate.marker",
    ]
