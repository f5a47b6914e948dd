"""AM110: pip installs of serverless_gpu, reported, and rewritten only with fix_pip (every other byte kept)."""

from __future__ import annotations

import json
from typing import Optional

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.engine import migrate_file
from air_migrate.rules import REGISTRY
from air_migrate.rules.am110_pip_installs import PipInstallsRule, validate_pip_package
from air_migrate.rule_base import FileOptions

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]


def fixed(line: str, kind: str = "ipynb", package: Optional[str] = None) -> Optional[str]:
    found = PipInstallsRule(FileOptions(kind, fix_pip=True, pip_package=package)).check(line)
    return found.new_line if found is not None else None


@pytest.mark.parametrize(
    "line, after",
    [
        ("%pip install serverless_gpu", "%pip install databricks-air-oss"),
        ("!pip install -q serverless-gpu torch", "!pip install -q databricks-air-oss torch"),
        (
            "%pip install   torch  Serverless_GPU==0.5.1   -U  # pinned",
            "%pip install   torch  databricks-air-oss   -U  # pinned",
        ),
        ("!pip3 install 'serverless_gpu>=0.4,<1' numpy", "!pip3 install 'databricks-air-oss' numpy"),
        (
            '!{sys.executable} -m pip install "serverless.gpu[ray] ~= 0.5"',
            '!{sys.executable} -m pip install "databricks-air-oss[ray]"',
        ),
        ("  %pip install serverless_gpu", "  %pip install databricks-air-oss"),
        ("!python3 -m pip install serverless_gpu", "!python3 -m pip install databricks-air-oss"),
        ("%pip install serverless_gpu databricks-air-oss", "%pip install databricks-air-oss"),
    ],
)
def test_fix_pip_rewrites_the_requirement_and_keeps_the_rest_of_the_line(line: str, after: str) -> None:
    assert fixed(line) == after
    assert PipInstallsRule(FileOptions("ipynb", fix_pip=True)).check(after) is None  # a second run finds nothing


def test_the_package_depends_on_the_kind_of_file_unless_named() -> None:
    assert fixed("# MAGIC %pip install serverless_gpu", "databricks") == "# MAGIC %pip install databricks-sdk-air"
    assert fixed("%pip install serverless_gpu", "ipynb") == "%pip install databricks-air-oss"
    assert fixed("%pip install serverless_gpu", "databricks", "my-air==1.2") == "%pip install my-air==1.2"


@pytest.mark.parametrize(
    "line",
    [
        "%pip install torch",
        "pip install serverless_gpu",  # no magic: a shell line, not this rule's
        "%pip install requirements_serverless_gpu_extra",
        "print('%pip install serverless_gpu')",
        "%pip uninstall serverless_gpu",
        "%pip install torch  # not serverless_gpu any more",
    ],
)
def test_other_lines_are_not_reported(line: str) -> None:
    assert PipInstallsRule(FileOptions("ipynb", fix_pip=True)).check(line) is None


def test_a_mention_that_is_not_a_requirement_is_reported_and_left() -> None:
    line = "%pip install git+https://github.com/acme/serverless_gpu.git"
    found = PipInstallsRule(FileOptions("ipynb", fix_pip=True)).check(line)
    assert found is not None and found.new_line is None and found.severity.needs_person
    assert found.column == line.index("serverless") + 1 == 42
    assert found.message.startswith("installs serverless_gpu in a form --fix-pip cannot")


@pytest.mark.parametrize("name", ["", "two words", "'quoted'", "pkg;rm -rf /", "-e ."])
def test_a_bad_package_name_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match="is not one package requirement"):
        validate_pip_package(name)
    with pytest.raises(ValueError, match="is not one package requirement"):
        migrate_file("x.py", b"import serverless_gpu\n", RULES, fix_pip=True, pip_package=name)


DATABRICKS = (
    "# Databricks notebook source\n"
    "# MAGIC %pip install -q serverless_gpu==0.5.1 torch  \n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "# MAGIC %md\n"
    "# MAGIC Install with `%pip install serverless_gpu`:\n"
    "# MAGIC %pip install serverless_gpu\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "from serverless_gpu import distributed\n"
)


def test_in_a_databricks_source_only_the_pip_line_of_the_magic_cell_changes() -> None:
    result = migrate_file("nb.py", DATABRICKS.encode(), RULES, fix_pip=True)
    assert result.migrated is not None
    assert result.migrated.decode() == DATABRICKS.replace(
        "serverless_gpu==0.5.1 torch", "databricks-sdk-air torch", 1
    ).replace("from serverless_gpu import", "from databricks.air import")
    pip = [r for r in result.records if r.code == "AM110"]
    assert [(r.cell, r.line, r.column, r.end_column, r.severity, r.message) for r in pip] == [
        (
            1,
            2,
            25,
            46,
            "review",
            "serverless_gpu -> databricks-sdk-air; the version specifier ==0.5.1 is dropped: "
            "it applies to serverless_gpu, not to databricks-sdk-air",
        ),
    ]  # nothing in the markdown cell
    assert (pip[0].before, pip[0].after) == (
        "# MAGIC %pip install -q serverless_gpu==0.5.1 torch  ",
        "# MAGIC %pip install -q databricks-sdk-air torch  ",
    )


def test_without_fix_pip_the_line_is_reported_for_a_person_and_kept() -> None:
    result = migrate_file("nb.py", DATABRICKS.encode(), RULES)
    assert result.migrated is not None and b"# MAGIC %pip install -q serverless_gpu==0.5.1 torch  \n" in result.migrated
    pip = [r for r in result.records if r.code == "AM110"]
    assert [(r.line, r.severity, r.message) for r in pip] == [
        (2, "manual", "installs serverless_gpu: install databricks-sdk-air instead (--fix-pip rewrites this line)")
    ]
    assert not result.blocked


def test_in_a_jupyter_notebook_the_magic_is_rewritten_in_its_masked_cell() -> None:
    nb = new_notebook(
        cells=[
            new_markdown_cell("%pip install serverless_gpu"),
            new_code_cell("%pip install serverless_gpu\r\nfrom serverless_gpu import distributed\r\n"),
            new_code_cell("!pip install serverless-gpu"),
        ],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    data = (nbformat.writes(nb) + "\n").encode()
    result = migrate_file("nb.ipynb", data, RULES, fix_pip=True, pip_package="databricks-air-oss[ray]")
    assert result.migrated is not None
    cells = ["".join(cell["source"]) for cell in json.loads(result.migrated)["cells"]]
    assert cells == [
        "%pip install serverless_gpu",
        "%pip install databricks-air-oss[ray]\r\nfrom databricks.air import distributed\r\n",
        "!pip install databricks-air-oss[ray]",
    ]
    assert [(r.cell, r.line, r.column) for r in result.records if r.code == "AM110"] == [(2, 1, 14), (3, 1, 14)]
    again = migrate_file("nb.ipynb", result.migrated, RULES, fix_pip=True)
    assert again.migrated is None and again.records == []


def test_a_blocked_file_keeps_its_pip_lines_too() -> None:
    source = (
        "# Databricks notebook source\n# MAGIC %pip install serverless_gpu\n\n# COMMAND ----------\n\n"
        "from serverless_gpu import distributed\ndistributed(**options)(f)\n"
    )
    assert migrate_file("nb.py", source.encode(), RULES, fix_pip=True).migrated is None
    partial = migrate_file("nb.py", source.encode(), RULES, fix_pip=True, partial=True).migrated
    assert partial is not None and b"%pip install databricks-sdk-air\n" in partial


def test_a_pip_line_inside_a_string_or_comment_of_python_code_is_text_not_a_magic() -> None:
    source = (
        '"""Set up with:\n%pip install serverless_gpu\n"""\n'
        "# MAGIC %pip install serverless_gpu\n"
        "import serverless_gpu\n"
    )
    for path, data in (("job.py", source), ("nb.py", "# Databricks notebook source\n" + source)):
        result = migrate_file(path, data.encode(), RULES, fix_pip=True)
        assert "AM110" not in [r.code for r in result.records]
        assert result.migrated is not None and result.migrated.decode().count("%pip install serverless_gpu") == 2


def test_a_bare_pip_line_in_a_databricks_python_cell_is_reported_and_fixed() -> None:
    source = "# Databricks notebook source\n%pip install serverless_gpu\nimport os\n"
    result = migrate_file("nb.py", source.encode(), RULES, fix_pip=True)
    assert sorted(r.code for r in result.records) == ["AM110"]  # the cell is read with its magic masked
    assert result.migrated == source.replace("serverless_gpu", "databricks-sdk-air").encode()


@pytest.mark.parametrize(
    "line, after",
    [
        ("# MAGIC pip install -q serverless_gpu torch", "# MAGIC pip install -q databricks-sdk-air torch"),
        ("# MAGIC %sh pip install serverless_gpu", "# MAGIC %sh pip install databricks-sdk-air"),
        ("# MAGIC cd /tmp && pip3 install serverless-gpu", "# MAGIC cd /tmp && pip3 install databricks-sdk-air"),
        (
            "# MAGIC sudo -H python3 -m pip install serverless_gpu",
            "# MAGIC sudo -H python3 -m pip install databricks-sdk-air",
        ),
        ("pip install 'serverless_gpu[ray]'", "pip install 'databricks-sdk-air[ray]'"),
    ],
)
def test_in_a_shell_cell_a_plain_pip_install_is_an_install(line: str, after: str) -> None:
    rule = PipInstallsRule(FileOptions("databricks", fix_pip=True))
    found = rule.check(line, shell=True)
    assert found is not None and found.new_line == after
    assert rule.check(line) is None  # outside a shell cell, a line without % or ! is not a command
    assert rule.check(after, shell=True) is None


def test_shell_cells_of_a_databricks_source_are_fixed_and_markdown_is_not() -> None:
    source = (
        "# Databricks notebook source\n"
        "# MAGIC %sh\n# MAGIC pip install serverless_gpu==0.5\n\n"
        "# COMMAND ----------\n\n"
        "# MAGIC %sh pip install serverless_gpu\n\n"
        "# COMMAND ----------\n\n"
        "# MAGIC %md\n# MAGIC pip install serverless_gpu\n\n"
        "# COMMAND ----------\n\n"
        "# MAGIC %python\n# MAGIC pip install serverless_gpu\n"
    )
    result = migrate_file("nb.py", source.encode(), RULES, fix_pip=True)
    assert result.migrated is not None
    assert result.migrated.decode() == source.replace(
        "pip install serverless_gpu==0.5", "pip install databricks-sdk-air"
    ).replace("%sh pip install serverless_gpu", "%sh pip install databricks-sdk-air")
    assert [(r.cell, r.line, r.severity) for r in result.records if r.code == "AM110"] == [
        (1, 3, "review"),
        (2, 7, "change"),
    ]


@pytest.mark.parametrize("magic", ["%%bash", "%%sh", "%%script bash", "%%script /bin/sh"])
def test_shell_cell_magics_of_a_jupyter_notebook_are_fixed(magic: str) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell(f"{magic}\npip install -U serverless_gpu\necho ok"),
            new_code_cell("%%script python\npip install serverless_gpu"),  # not a shell
        ],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    result = migrate_file("nb.ipynb", (nbformat.writes(nb) + "\n").encode(), RULES, fix_pip=True)
    assert result.migrated is not None
    cells = ["".join(cell["source"]) for cell in json.loads(result.migrated)["cells"]]
    assert cells == [
        f"{magic}\npip install -U databricks-air-oss\necho ok",
        "%%script python\npip install serverless_gpu",
    ]
    reported = migrate_file("nb.ipynb", (nbformat.writes(nb) + "\n").encode(), RULES)
    assert [(r.cell, r.line, r.severity) for r in reported.records if r.code == "AM110"] == [(1, 2, "manual")]
