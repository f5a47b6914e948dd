"""The installed layout: import names, the namespace package, the console script."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import databricks.air


def test_we_ship_no_databricks_init_so_databricks_sdk_can_coexist() -> None:
    shipped = [str(f) for f in importlib.metadata.files("databricks-air-oss") or []]
    assert "databricks/__init__.py" not in shipped
    assert importlib.util.find_spec("databricks.air") is not None
    if importlib.util.find_spec("databricks.sdk") is not None:  # mlflow installs it: both import side by side
        importlib.import_module("databricks.sdk")


def test_version_matches_the_distribution() -> None:
    assert databricks.air.__version__ == importlib.metadata.version("databricks-air-oss")
    assert set(databricks.air.__all__) >= {"distributed", "__version__"}


def test_importing_the_package_does_not_import_torch_or_mlflow() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, databricks.air; print('torch' in sys.modules, 'mlflow' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False False"


def test_air_migrate_is_installed_as_a_command(tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("air-migrate")
    assert executable.exists()
    usage = subprocess.run([executable], capture_output=True, text=True)
    assert usage.returncode == 2 and "give at least one file or directory" in usage.stderr
    (tmp_path / "job.py").write_text("from serverless_gpu import distributed\n")
    done = subprocess.run([executable, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "job.py").read_text() == "from databricks.air import distributed\n"


# --- how the docs say to install it ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _section(page: Path, heading: str) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + len(heading) + 2)
    return text[start : end if end != -1 else len(text)]


def _first_block(section: str, fence: str) -> str:
    start = section.index(f"```{fence}\n") + len(fence) + 4
    return section[start : section.index("```", start)]


def test_readme_and_getting_started_give_the_same_install_recipe() -> None:
    readme = _first_block(_section(ROOT / "README.md", "## Install"), "bash")
    page = _first_block(_section(ROOT / "docs" / "getting-started.md", "## Install"), "bash")
    assert readme == page
    assert "pip install -c constraints.txt ." in readme and "pip wheel --no-deps -w dist ." in readme
    assert "[dev]" not in readme and "deepspeed" not in readme  # the quickstart needs neither


def test_the_wheel_the_docs_name_is_the_one_pip_wheel_builds() -> None:
    wheel = f"dist/databricks_air_oss-{databricks.air.__version__}-py3-none-any.whl"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {page.name: page.read_text(encoding="utf-8").count("dist/databricks_air_oss-") for page in pages}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert text.count("dist/databricks_air_oss-") == text.count(wheel), f"{page.name} names another version"
    assert named["README.md"] and named["getting-started.md"]


def test_nothing_says_to_install_the_package_from_an_index() -> None:
    """The package is not on PyPI: no page, example or message of ours tells pip to fetch it by name."""
    by_name = re.compile(r"pip install [^\n`]*(?<![\w./-])[\"']?databricks-air-oss\b")
    files = [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "examples").rglob("*.*"),
        *(ROOT / "databricks_air").rglob("*.py"),
        *(ROOT / "serverless_gpu").rglob("*.py"),
    ]
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in files
        if path.is_file()
        for match in by_name.finditer(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []


def test_the_ray_message_names_what_the_ray_extra_brings() -> None:
    from databricks.air._ray.require import RAY_REQUIREMENT

    requirements = importlib.metadata.requires("databricks-air-oss") or []
    assert [r.split(";")[0].strip() for r in requirements if r.endswith('extra == "ray"')] == [RAY_REQUIREMENT]
    assert set(importlib.metadata.metadata("databricks-air-oss").get_all("Provides-Extra") or []) >= {
        "ray",
        "deepspeed",
        "docs",
        "dev",
    }


def test_ci_runs_the_readme_developing_commands() -> None:
    section = _section(ROOT / "README.md", "## Developing")
    install = _first_block(section, "sh").strip()
    tests = _first_block(section[section.index("Run the tests") :], "sh").strip()
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"({install})" in script and f"({tests})" in script


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """An editable install finds every folder; a wheel ships only the packages ``pyproject.toml`` lists."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the project depends on tomli there
        import tomli as tomllib  # type: ignore[no-redef]

    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: root / path for name, path in config["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            found.add(".".join([name, *relative.parts]) if relative.parts else name)
    assert sorted(found - set(config["packages"])) == []
