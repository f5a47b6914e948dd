"""Every reported position refers to the input text, whatever other rules changed first, in every kind of file."""

from __future__ import annotations

from typing import List, Optional, Tuple

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from air_migrate.engine import FileResult, migrate_file
from air_migrate.rules import REGISTRY

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
LINE = '@distributed(gpus=8, gpu_type="H100", remote=True)'


def where(result: FileResult) -> List[Tuple[Optional[int], int, int, Optional[int], Optional[int], str]]:
    return sorted((r.cell, r.line, r.column, r.end_line, r.end_column, r.code) for r in result.records)


def test_a_type_after_a_renamed_keyword_is_reported_at_its_input_column() -> None:
    source = f"from serverless_gpu import distributed\n{LINE}\ndef f(): ...\n"
    result = migrate_file("job.py", source.encode(), RULES)
    assert where(result) == [
        (None, 1, 1, 1, 39, "AM101"),
        (None, 2, 14, 2, 18, "AM102"),
        (None, 2, 22, 2, 30, "AM102"),
        (None, 2, 31, 2, 37, "AM103"),  # '"H100"' starts at column 31 of the input, not of the rewritten line
    ]
    assert LINE[30:36] == '"H100"'
    assert [(r.before, r.after) for r in result.records if r.code == "AM103"] == [('"H100"', '"GPU_8xH100"')]


def test_databricks_positions_are_lines_of_the_file_even_with_earlier_cells_as_context() -> None:
    source = (
        "# Databricks notebook source\n"
        "from serverless_gpu import distributed\n"
        "\n"
        "# COMMAND ----------\n"
        "\n"
        "x = 1\n"
        f"{LINE}\n"
        "def f(): ...\n"
    )
    result = migrate_file("nb.py", source.encode(), RULES)
    assert where(result) == [
        (1, 2, 1, 2, 39, "AM101"),
        (2, 7, 14, 7, 18, "AM102"),
        (2, 7, 22, 7, 30, "AM102"),
        (2, 7, 31, 7, 37, "AM103"),
    ]


def test_notebook_positions_are_lines_of_the_cell_with_magics_in_place() -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("from serverless_gpu import distributed"),
            new_code_cell(f"files = !ls\n%env X=1\n{LINE}\ndef f(): ..."),
        ],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    result = migrate_file("nb.ipynb", (nbformat.writes(nb) + "\n").encode(), RULES)
    assert where(result) == [
        (1, 1, 1, 1, 39, "AM101"),
        (2, 3, 14, 3, 18, "AM102"),
        (2, 3, 22, 3, 30, "AM102"),
        (2, 3, 31, 3, 37, "AM103"),
    ]


def test_a_multi_line_finding_ends_where_its_node_ends() -> None:
    source = "from serverless_gpu import (\n    distributed,\n)\n"
    (record,) = migrate_file("job.py", source.encode(), RULES).records
    assert (record.line, record.column, record.end_line, record.end_column) == (1, 1, 3, 2)
    assert record.before == source.rstrip("\n")
    assert record.after == record.before.replace("serverless_gpu", "databricks.air")
