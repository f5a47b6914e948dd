"""Configuration in ``pyproject.toml`` under ``[tool.air-migrate]``: found from the current directory
upward as ruff finds its own, the command line winning, ``--show-settings`` saying what is in force and where it
came from, and a bad table refused with the file, the key and the fix (exit code 2)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from air_migrate.cli import main

OLD = 'from serverless_gpu import distributed\n\n@distributed(gpus=8, gpu_type="H100")\ndef train(): ...\n'
IMPORT_ONLY = OLD.replace("from serverless_gpu", "from databricks.air")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a script to migrate, a package folder below it, and the current directory in that folder."""
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "job.py").write_text(OLD)
    monkeypatch.chdir(tmp_path / "src" / "pkg")
    return tmp_path


def _config(directory: Path, table: str, before: str = '[project]\nname = "demo"\n\n') -> Path:
    path = directory / "pyproject.toml"
    path.write_text(before + "[tool.air-migrate]\n" + table)
    return path


def _settings(capsys: pytest.CaptureFixture[str], *options: str) -> List[str]:
    assert main(["--show-settings", *options]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_table_of_a_pyproject_above_the_current_directory_is_used(project: Path, capsys) -> None:
    _config(project, 'select = ["AM101"]\n')
    assert main(["job.py"]) == 0
    assert (project / "src" / "pkg" / "job.py").read_text() == IMPORT_ONLY  # only AM101 ran
    capsys.readouterr()
    (project / "src" / "pkg" / "job.py").write_text(OLD)
    assert main(["--isolated", "job.py"]) == 0  # --isolated: every rule
    assert "num_accelerators=8" in (project / "src" / "pkg" / "job.py").read_text()


def test_a_pyproject_without_the_table_is_passed_over_and_the_nearest_with_it_is_the_only_one_read(
    project: Path, capsys
) -> None:
    _config(project, 'select = ["AM101"]\nfix-pip = true\n')
    middle = _config(project / "src", "todo-comments = true\n")
    (project / "src" / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\n[tool.ruff]\nline-length = 1\n')
    lines = _settings(capsys)
    assert lines[0] == f"configuration: {middle}"
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:-1]}
    assert rows["select"] == ["[]", "(default)"] and rows["fix-pip"] == ["false", "(default)"]  # nothing merged
    assert rows["todo-comments"] == ["true", f"({middle})"]
    assert lines[-1] == "rules in force: AM101, AM102, AM103, AM108, AM110, AM111, AM201, AM217"


def test_show_settings_says_where_each_value_came_from_and_the_command_line_wins(project: Path, capsys) -> None:
    config = _config(
        project,
        'select = ["AM101", "AM102"]\nignore = ["AM102"]\nexclude = ["build"]\n'
        'fix-pip = true\npip-package = "databricks-air-oss==0.3"\n',
    )
    assert _settings(capsys, "--ignore", "AM103", "--no-fix-pip") == [
        f"configuration: {config}",
        f'  select         ["AM101", "AM102"]         ({config})',
        '  ignore         ["AM103"]                  (command line)',
        f'  exclude        ["build"]                  ({config})',
        "  fix-pip        false                      (command line)",
        f'  pip-package    "databricks-air-oss==0.3"  ({config})',
        "  todo-comments  false                      (default)",
        "rules in force: AM101, AM102",
    ]


def test_without_a_table_anywhere_show_settings_says_where_it_looked(project: Path, capsys) -> None:
    lines = _settings(capsys)
    assert lines[0] == (
        f"configuration: none (no pyproject.toml with a [tool.air-migrate] table in {project / 'src' / 'pkg'} or above)"
    )
    assert all(line.endswith("(default)") for line in lines[1:-1])


def test_exclude_fix_pip_and_todo_comments_from_the_file_take_effect(project: Path, capsys) -> None:
    (project / "src" / "pkg" / "build").mkdir()
    (project / "src" / "pkg" / "build" / "old.py").write_text(OLD)
    (project / "src" / "pkg" / "nb.py").write_text(
        "# Databricks notebook source\n# MAGIC %pip install serverless_gpu\n\n# COMMAND ----------\n\n"
        "import serverless_gpu\n"
    )
    (project / "src" / "pkg" / "sweep.py").write_text(
        "import os\nfrom serverless_gpu import distributed\n\nn = int(os.environ['N'])\n\n"
        '@distributed(gpus=n, gpu_type="H100")\ndef f(): ...\n'
    )
    _config(project, 'exclude = ["build"]\nfix-pip = true\npip-package = "my-air"\ntodo-comments = true\n')
    main(["."])
    assert (project / "src" / "pkg" / "build" / "old.py").read_text() == OLD
    notebook = (project / "src" / "pkg" / "nb.py").read_text()
    assert "# MAGIC %pip install my-air\n" in notebook
    assert "# TODO(air-migrate AM104)" in (project / "src" / "pkg" / "sweep.py").read_text()
    capsys.readouterr()
    main(["--exclude", "nothing", "--check", "."])  # the command line's exclude replaces the file's
    assert "build/old.py: would change" in capsys.readouterr().out


def test_a_pip_package_from_the_file_needs_no_fix_pip_on_the_command_line(project: Path, capsys) -> None:
    _config(project, 'pip-package = "my-air"\n')
    assert main(["--check", "job.py"]) == 1  # no usage error: the package waits for --fix-pip
    with pytest.raises(SystemExit) as exited:  # given on the command line without --fix-pip: a usage error
        main(["--check", "--pip-package", "x", "job.py"])
    assert exited.value.code == 2
    assert "--pip-package only applies with --fix-pip" in capsys.readouterr().err


@pytest.mark.parametrize(
    "table, message",
    [
        (
            "fixpip = true\n",
            "[tool.air-migrate] has an unknown key 'fixpip' (did you mean 'fix-pip'?); the keys are select, ignore, "
            "exclude, fix-pip, pip-package, todo-comments",
        ),
        (
            'select = "AM101"\n',
            '[tool.air-migrate] select must be a list of rule codes (e.g. ["AM101", "AM102"]), not a string (\'AM101\')',
        ),
        (
            'ignore = ["AM101", "AM999"]\n',
            "[tool.air-migrate] ignore has unknown rule code(s) AM999; the rule codes are AM101, AM102, AM103, AM108, AM110, "
            "AM111, AM201, AM217 (see air-migrate --list-rules)",
        ),
        ("select = []\n", "[tool.air-migrate] select is empty: leave it out to run every rule"),
        ("todo-comments = 1\n", "[tool.air-migrate] todo-comments must be true or false, not a number (1)"),
        (
            "exclude = [1]\n",
            '[tool.air-migrate] exclude must be a list of globs (e.g. ["build", "tests/*.py"]), not a list',
        ),
        (
            'pip-package = "a b"\n',
            "[tool.air-migrate] pip-package 'a b' is not one package requirement (e.g. databricks-air-oss or "
            "databricks-air-oss==0.3)",
        ),
    ],
)
def test_a_bad_table_names_the_file_the_key_and_the_fix_and_exits_2(
    project: Path, capsys, table: str, message: str
) -> None:
    config = _config(project, table)
    assert main(["--check", "job.py"]) == 2
    assert capsys.readouterr().err == f"air-migrate: error: {config}: {message}\n"
    assert (project / "src" / "pkg" / "job.py").read_text() == OLD
    assert main(["--isolated", "--check", "job.py"]) == 1  # the way out the message of a broken file names


def test_a_pyproject_that_is_not_toml_is_an_error_naming_it(project: Path, capsys) -> None:
    (project / "pyproject.toml").write_text("[tool.air-migrate\n")
    assert main(["--check", "job.py"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"air-migrate: error: {project / 'pyproject.toml'}: not valid TOML: ")
    assert error.endswith("fix the file, or run with --isolated to read no configuration\n")


def test_a_table_that_is_not_a_table_is_an_error(project: Path, capsys) -> None:
    (project / "pyproject.toml").write_text('[tool]\nair-migrate = "AM101"\n')
    assert main(["--check", "job.py"]) == 2
    assert "tool.air-migrate must be a table" in capsys.readouterr().err
