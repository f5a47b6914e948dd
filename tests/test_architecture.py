"""The shape of ``databricks.air``: no import circle, the parts below the API never import it, and
``docs/architecture.md`` names exactly the modules that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

from import_graph import find_circle, import_graph, imports_of, modules_of

import databricks.air

PACKAGE = "databricks.air"
PACKAGE_DIR = Path(databricks.air.__file__).parent
ROOT = PACKAGE_DIR.parent
MODULES = modules_of(PACKAGE_DIR, PACKAGE)
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
PARTS = ("_engine", "_ray", "_tracking", "data", "workloads")
PUBLIC = {  # the reference's module names, and the few of ours the docs tell users to import
    "launcher",
    "compute",
    "exceptions",
    "runtime",
    "utils",
    "ray",
    "data",
    "asynchronous",
    "log_patterns",
    "version",
    "workloads",
}


def test_there_is_no_import_circle() -> None:
    circle = find_circle(import_graph(MODULES, PACKAGE))
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_parts_never_import_the_launcher_or_the_package_api() -> None:
    offending: List[str] = []
    for module in MODULES:
        if not any(module.startswith(f"{PACKAGE}.{part}") for part in PARTS):
            continue
        for node, target in imports_of(module, MODULES, PACKAGE):
            if target in (PACKAGE, f"{PACKAGE}.launcher"):  # a name of the package's __init__, or the launcher
                offending.append(f"{module}:{node.lineno} imports {target}")
    assert offending == []


def test_internal_modules_and_packages_begin_with_an_underscore() -> None:
    """Users import the public names only: a module of ours that is not one of them says so by its name."""
    names = {
        path.stem if path.is_file() else path.name
        for path in PACKAGE_DIR.iterdir()
        if (path.suffix == ".py" and path.is_file()) or (path / "__init__.py").is_file()
    }
    assert PUBLIC <= names, "a public module is gone"
    assert sorted(name for name in names - PUBLIC if not name.startswith("_")) == [], "prefix these with _"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    files = {
        "__init__.py": "from databricks.air.launcher import distributed\n",
        "launcher.py": "from databricks.air._engine import run\n",
        "_engine/__init__.py": "",
        "_engine/run.py": "def go():\n    from databricks.air import distributed\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = modules_of(tmp_path, PACKAGE)
    assert [target for _, target in imports_of(f"{PACKAGE}._engine.run", modules, PACKAGE)] == [PACKAGE]
    assert find_circle(import_graph(modules, PACKAGE)) == [
        PACKAGE,
        f"{PACKAGE}.launcher",
        f"{PACKAGE}._engine.run",
        PACKAGE,
    ]


def _named_paths() -> List[str]:
    return sorted(set(re.findall(r"`((?:databricks_air|codemods|serverless_gpu)/[\w/]*(?:\.py|/))`", ARCHITECTURE)))


def test_every_module_the_architecture_page_names_exists() -> None:
    missing = [path for path in _named_paths() if not (ROOT / path).exists()]
    assert missing == []


def test_the_architecture_page_names_every_module() -> None:
    named = set(_named_paths())
    sources = [*PACKAGE_DIR.rglob("*.py"), *(ROOT / "codemods").glob("*.py")]
    unnamed = sorted(
        str(path.relative_to(ROOT))
        for path in sources
        if path.name != "__init__.py"
        and not (path.parent.name == "codemods" and path.name == "__main__.py")
        and str(path.relative_to(ROOT)) not in named
    )
    assert unnamed == [], "name these in docs/architecture.md"
