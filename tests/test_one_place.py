"""Things that live in exactly one place, so that a reader finds them by name and a change is made once.

* every environment variable of ours is named in ``_variables.py`` (and the user-facing ones are documented), and
  the number ones are parsed in ``_settings.py``;
* process groups, parent death and free ports are handled in ``_engine/processes.py``;
* whether the caller is a Jupyter kernel is asked in ``_notebook.py``;
* the files of a call's log folder are named in ``_call_folder.py``;
* the launcher reaches the engine through its entry point, ``_engine/launch.py``;
* Ray's cluster connection, resources, placement groups and host polling live in ``_ray/``;
* no text points at a numbered item of a document that is not in the repository.
"""

from __future__ import annotations

import pytest

import ast
import re
from pathlib import Path
from typing import Iterator, List, Set, Tuple

from databricks.air import _variables

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "databricks_air"
SOURCES = [PACKAGE, ROOT / "serverless_gpu", ROOT / "codemods"]
OUR_VARIABLE = re.compile(r"DATABRICKS_(AIR|INTERNAL)_[A-Z_]+")
BOOKKEEPING = {  # not for users to set
    _variables.BETA_NOTICE_SHOWN,
    _variables.SERVERLESS_GPU_WARNED,
    _variables.RANK_HOOKS,
    _variables.RUN_SNAPSHOT,
    _variables.METRICS_ADDRESS,
    _variables.METRICS_KEY,
    _variables.LAST_CHECKPOINT_FILE,
}


def python_files(*folders: Path) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(folder.rglob("*.py"))


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def strings_in_code(tree: ast.Module) -> Iterator[ast.Constant]:
    """Every string constant that is not a docstring (a string standing alone as a statement)."""
    standalone = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in standalone:
            yield node


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_every_variable_of_ours_is_named_in_variables_py_only() -> None:
    spelled: List[str] = []
    for path in python_files(*SOURCES):
        if path == PACKAGE / "_variables.py":
            continue
        spelled += [
            f"{where(path, node)}: {node.value!r}"
            for node in strings_in_code(parsed(path))
            if OUR_VARIABLE.search(node.value)
        ]
    assert spelled == [], "name these through databricks.air._variables:\n" + "\n".join(spelled)


def test_every_variable_for_users_is_documented() -> None:
    docs = "\n".join(page.read_text(encoding="utf-8") for page in (ROOT / "docs").rglob("*.md"))
    names = {value for key, value in vars(_variables).items() if key.isupper() and isinstance(value, str)}
    assert names and all(OUR_VARIABLE.fullmatch(name) for name in names)
    assert sorted(name for name in names - BOOKKEEPING if name not in docs) == []


def test_our_number_variables_are_parsed_in_settings_py_only() -> None:
    """Each has its default, parser and message in ``_settings.py``; nothing else turns one into a number."""
    parsed_elsewhere = [
        where(path, node)
        for path in python_files(PACKAGE)
        if path.name != "_settings.py"
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") in ("float", "int")
        and any(
            isinstance(inner, ast.Attribute) and getattr(inner.value, "id", "") == "_variables"
            for argument in node.args
            for inner in ast.walk(argument)
        )
    ]
    assert parsed_elsewhere == [], "read these through a databricks.air._settings.Setting"


def calls_and_imports(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """The names of the functions a module calls (``os.killpg`` -> ``killpg``) and of what it imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
            yield name, node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                yield alias.name, node
            if isinstance(node, ast.ImportFrom) and node.module:
                yield node.module, node


def users_of(names: Set[str]) -> Set[str]:
    found = set()
    for path in python_files(*SOURCES):
        for name, _ in calls_and_imports(parsed(path)):
            if name in names:
                found.add(str(path.relative_to(ROOT)))
    return found


@pytest.mark.slow
def test_process_groups_parent_death_and_ports_are_handled_in_processes_py() -> None:
    assert users_of({"killpg", "prctl", "getppid"}) == {"databricks_air/_engine/processes.py"}
    defined = {
        f"{path.relative_to(ROOT)}:{node.name}"
        for path in python_files(PACKAGE)
        for node in ast.walk(parsed(path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.lstrip("_") in ("kill_group", "free_port", "set_parent_death_signal", "job_environ")
    }
    assert defined == {
        "databricks_air/_engine/processes.py:kill_group",
        "databricks_air/_engine/processes.py:free_port",
        "databricks_air/_engine/processes.py:set_parent_death_signal",
        "databricks_air/_engine/rank_environ.py:job_environ",
        "databricks_air/_ray/rank_host.py:free_port",  # the actor's method, for the caller: it calls the one above
    }


def test_one_module_asks_whether_this_is_a_jupyter_kernel() -> None:
    assert users_of({"get_ipython"}) == {"databricks_air/_notebook.py"}


def test_the_launcher_reaches_the_engine_through_its_entry_point_only() -> None:
    imported = set()
    for node in ast.walk(parsed(PACKAGE / "launcher.py")):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    engine = "databricks.air._engine"
    assert {name for name in imported if name.startswith(f"{engine}.")} == {f"{engine}.launch"}


RAY = PACKAGE / "_ray"
RAY_PLACEMENT = {
    "placement_group",
    "remove_placement_group",
    "PlacementGroupSchedulingStrategy",
    "ray.util.placement_group",
    "ray.util.scheduling_strategies",
    "get_max_resources_from_cluster_config",
}
RAY_CLUSTER_CALLS = ("ray.nodes", "ray.init")  # ``ray.nodes()``, ``self.ray.init(...)``
RAY_DEFINITIONS = re.compile(
    r"_?(ACCELERATOR_AMOUNT|ACCELERATOR_RESOURCE_PREFIX|RAY_ACCELERATOR_NAMES|accelerator_resource)$"
)


def defined_names(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """The names a module defines: functions, classes and assigned names, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    yield target.id, node


def test_ray_placement_lives_in_ray() -> None:
    """Ray placement lives in ``_ray/``: the cluster's connection, what a unit of work reserves (one accelerator
    resource, one amount), placement groups and their strategies, the polls that find lost hosts; the workload
    command's Ray backend uses them, and reaches the remote call's ``RayCall`` never."""
    outside = [path for path in python_files(*SOURCES) if RAY not in path.parents]
    placing = sorted(
        f"{where(path, node)}: {name}"
        for path in outside
        for name, node in calls_and_imports(parsed(path))
        if name in RAY_PLACEMENT or isinstance(node, ast.Call) and ast.unparse(node.func).endswith(RAY_CLUSTER_CALLS)
    )
    assert placing == [], "use databricks.air._ray's placement, resources and session:\n" + "\n".join(placing)
    defined = sorted(
        f"{path.relative_to(ROOT)}:{name.lstrip('_')}"
        for path in python_files(PACKAGE)
        for name, _ in defined_names(parsed(path))
        if RAY_DEFINITIONS.match(name)
    )
    assert defined == [
        "databricks_air/_ray/resources.py:ACCELERATOR_AMOUNT",
        "databricks_air/_ray/resources.py:ACCELERATOR_RESOURCE_PREFIX",
        "databricks_air/_ray/resources.py:RAY_ACCELERATOR_NAMES",
        "databricks_air/_ray/resources.py:accelerator_resource",
    ]
    importers = {
        str(path.relative_to(ROOT))
        for path in outside
        for name, node in calls_and_imports(parsed(path))
        if isinstance(node, ast.ImportFrom) and name == "databricks.air._ray.ray_call"
    }
    assert importers == {"databricks_air/_engine/launch.py"}  # where the way ranks start is chosen


# Names of documents that live outside this repository, and numbered items of them ("item 21", "3.3").
OUTSIDE_REFERENCES = re.compile(
    r"reference-api|shared/research|[a-z]+-anchors\.md|\bDESIGN\.md|\bSTYLE\.md|\bitems? \d+\b"
    r"|\breference \d+\.\d+|§ ?\d"
)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".ipynb", ".sh"}


def test_no_text_points_at_a_numbered_item_of_a_document_outside_the_repository() -> None:
    folders = [*SOURCES, ROOT / "tests", ROOT / "bench", ROOT / "docs", ROOT / "examples"]
    files = [ROOT / "README.md"] + [
        path
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.suffix in TEXT_SUFFIXES and path != Path(__file__).resolve() and ".venv" not in path.parts
    ]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        if OUTSIDE_REFERENCES.search(line)
    ]
    assert found == [], "say what is meant instead of pointing elsewhere:\n" + "\n".join(found)


def test_tcp_listeners_are_opened_in_processes_py() -> None:
    """One place decides the address a listener binds (loopback unless the user names another): ``listen``. Torch's
    ``TCPStore`` as a server gets its socket from there (``master_listen_fd``), since alone it listens everywhere."""
    unix_sockets = {"databricks_air/_engine/rank_probe.py", "databricks_air/_tracking/tracking_host.py"}
    assert users_of({"listen"}) - unix_sockets == {
        "databricks_air/_engine/processes.py",
        "databricks_air/_engine/rank_server.py",
        "databricks_air/_ray/rank_cluster.py",
    }
    servers = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in python_files(PACKAGE)
        for name, node in calls_and_imports(parsed(path))
        if name == "TCPStore"
        and isinstance(node, ast.Call)
        and any(keyword.arg == "is_master" for keyword in node.keywords)
        and not any(keyword.arg == "master_listen_fd" for keyword in node.keywords)
    ]
    assert servers == []


# The names of what lies in a call's log folder, as a string of the code spells them (an f-string's parts included).
LOG_FOLDER_NAMES = re.compile(
    r"rank_|rank_\*\.txt|stall_|attempt_|\.running"
    r"|.*(summary\.txt|suspects\.json|stragglers\.json|\.last_checkpoint|flight_recorder_rank_).*"
)


def test_the_files_of_a_calls_log_folder_are_named_in_call_folder_py_only() -> None:
    """The engine writes them, and the call's MLflow run, the restarts and the messages read them: each name is
    spelled once (``CallFolder``), as the workload command's run folder names its files in ``RunFolder``."""
    spelled = [
        f"{where(path, node)}: {node.value!r}"
        for path in python_files(PACKAGE, ROOT / "serverless_gpu")
        if path != PACKAGE / "_call_folder.py"
        for node in strings_in_code(parsed(path))
        if LOG_FOLDER_NAMES.fullmatch(node.value)
    ]
    assert spelled == [], "name these through databricks.air._call_folder.CallFolder:\n" + "\n".join(spelled)


def test_the_prefix_of_the_librarys_own_lines_is_spelled_in_notices_py_only() -> None:
    spelled = [
        f"{where(path, node)}: {node.value!r}"
        for path in python_files(PACKAGE)
        if path != PACKAGE / "_notices.py"
        for node in strings_in_code(parsed(path))
        if node.value.startswith("databricks.air: ")
    ]
    assert spelled == [], "write these with databricks.air._notices (notice, prefixed or PREFIX):\n" + "\n".join(
        spelled
    )
