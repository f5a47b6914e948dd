"""todo_comments: a TODO marker above each statement that needs a person, once, and only where code lives."""

from __future__ import annotations

import json

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from air_migrate.engine import FileResult, migrate_file
from air_migrate.rules import REGISTRY

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
BLOCKED = "from serverless_gpu import distributed\n\n@distributed(**options)  # tuned\ndef train(): ...\n"
MARKER = "# TODO(air-migrate AM102): keywords passed through ** cannot be checked for gpus/gpu_type\n"


def migrate(source: str, path: str = "job.py", **options: object) -> FileResult:
    return migrate_file(path, source.encode(), RULES, todo_comments=True, **options)  # type: ignore[arg-type]


def text(result: FileResult) -> str:
    return (result.migrated if result.migrated is not None else result.original).decode()


def test_a_blocked_file_gets_only_its_markers_and_a_rerun_adds_none() -> None:
    result = migrate(BLOCKED)
    assert text(result) == BLOCKED.replace("@distributed", MARKER + "@distributed")  # the import is held back
    again = migrate(text(result))
    assert again.migrated is None  # nothing new to write
    assert [r.code for r in again.records] == [r.code for r in result.records]


def test_without_the_option_nothing_is_written_into_a_blocked_file() -> None:
    assert migrate_file("job.py", BLOCKED.encode(), RULES).migrated is None


def test_with_partial_the_changes_and_the_markers_are_both_written() -> None:
    result = migrate(BLOCKED, partial=True)
    assert text(result) == BLOCKED.replace("from serverless_gpu", "from databricks.air").replace(
        "@distributed", MARKER + "@distributed"
    )
    assert migrate(text(result), partial=True).migrated is None


def test_markers_take_the_indentation_of_their_statement() -> None:
    source = "from serverless_gpu import distributed\nif True:\n\tdef f():\n\t\tdistributed(**o)(g)\n"
    assert text(migrate(source)) == source.replace("\t\tdistributed", "\t\t" + MARKER + "\t\tdistributed")


def test_an_existing_marker_of_the_same_code_is_not_repeated() -> None:
    source = BLOCKED.replace("@distributed", "# TODO(air-migrate AM102): an older wording\n@distributed")
    assert migrate(source).migrated is None


def test_changes_and_review_items_get_no_marker() -> None:
    result = migrate("from serverless_gpu import *\ndistributed(gpus=2)(f)\n")
    assert "TODO" not in text(result)


def test_markers_go_below_a_shebang_and_keep_the_line_ending() -> None:
    source = '#!/usr/bin/env python\r\nm = __import__("serverless_gpu")\r\nx = 1\r\n'
    marker = (
        '# TODO(air-migrate AM101): a dynamic import of "serverless_gpu" is left as it is: import databricks.air '
        "instead\r\n"
    )
    assert text(migrate(source)) == source.replace("m = ", marker + "m = ")


def test_a_note_gets_no_marker() -> None:
    source = '"""Trains with serverless_gpu."""\nx = 1\n'  # a mention in prose is a note (info), nothing to do
    assert migrate(source).migrated is None


DATABRICKS = (
    "# Databricks notebook source\n"
    'm = __import__("serverless_gpu")\n'
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "# MAGIC %pip install serverless_gpu\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "from serverless_gpu import distributed\n"
)


def test_in_a_databricks_source_markers_stay_in_python_cells_below_the_header() -> None:
    result = migrate(DATABRICKS, "nb.py")
    assert text(result) == DATABRICKS.replace(
        "m = ",
        '# TODO(air-migrate AM101): a dynamic import of "serverless_gpu" is left as it is: import '
        "databricks.air instead\n" + "m = ",
    ).replace("from serverless_gpu", "from databricks.air")
    assert text(result).startswith("# Databricks notebook source\n# TODO")
    assert "# MAGIC %pip install serverless_gpu\n\n" in text(result)  # reported (AM110), no marker in a MAGIC cell
    assert migrate(text(result), "nb.py").migrated is None


def test_in_a_jupyter_notebook_a_marker_lands_in_the_cell_beside_its_magics() -> None:
    nb = new_notebook(
        cells=[new_code_cell("%%time\nfrom serverless_gpu import distributed\ndistributed(**o)(f)")],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    result = migrate(nbformat.writes(nb) + "\n", "nb.ipynb")
    source = "".join(json.loads(text(result))["cells"][0]["source"])
    assert source == "%%time\nfrom serverless_gpu import distributed\n" + MARKER + "distributed(**o)(f)"
