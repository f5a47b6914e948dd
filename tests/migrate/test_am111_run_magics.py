"""AM111: %run lines in files that mention serverless_gpu are reported for a person, never changed."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.engine import migrate_file
from air_migrate.rules import REGISTRY

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
MESSAGE = (
    "%run ./setup runs another notebook: names it defines are not resolved here, so uses of them are not migrated; "
    "run air-migrate on it too and check this notebook by hand"
)


def _notebook(*cells: str) -> bytes:
    nb = new_notebook(
        cells=[new_markdown_cell("Run `%run ./setup` first"), *map(new_code_cell, cells)],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    return (nbformat.writes(nb) + "\n").encode()


def test_a_run_magic_in_a_jupyter_notebook_is_reported() -> None:
    result = migrate_file("nb.ipynb", _notebook("%run ./setup", "@distributed(gpus=2)\ndef f(): ..."), RULES)
    runs = [
        (r.cell, r.line, r.column, r.end_column, r.severity, r.message) for r in result.records if r.code == "AM111"
    ]
    assert runs == [(2, 1, 1, 13, "manual", MESSAGE)]  # the markdown cell's mention is not code


def test_a_magic_run_line_in_a_databricks_source_is_reported_and_kept() -> None:
    source = (
        "# Databricks notebook source\n# MAGIC %run ./setup\n\n# COMMAND ----------\n\n"
        "from serverless_gpu import distributed\n"
    )
    result = migrate_file("nb.py", source.encode(), RULES)
    assert [(r.cell, r.line, r.column, r.message) for r in result.records if r.code == "AM111"] == [(1, 2, 9, MESSAGE)]
    assert result.migrated is not None and b"# MAGIC %run ./setup\n" in result.migrated  # not blocking


def test_files_with_nothing_to_migrate_say_nothing_about_run() -> None:
    assert migrate_file("nb.ipynb", _notebook("%run ./setup", "x = 1"), RULES).records == []


def test_ignoring_the_rule_silences_it() -> None:
    rules = [rule for rule in RULES if rule.CODE != "AM111"]
    result = migrate_file("nb.ipynb", _notebook("%run ./setup", "import serverless_gpu"), rules)
    assert [r.code for r in result.records] == ["AM101"]
