"""A Python cell of a Databricks notebook source that holds a bare magic line (``%pip install x`` without ``# MAGIC``,
``!nvidia-smi``) is migrated as the same cell of a Jupyter notebook is: its magics are masked while it is parsed and
put back as written (issue 31, 3). Before, the whole cell was skipped (AM902) while the ``.ipynb`` was migrated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_fixtures import notebook
from golden_harness import run_cli
from rule_helpers import migrate_text as migrate

CELL = (
    '%pip install torchmetrics\nimport serverless_gpu\n\n@serverless_gpu.distributed(gpus=1, gpu_type="A10")\n'
    "def train():\n    return 1\n"
)
AFTER = (
    "%pip install torchmetrics\nimport databricks.air\n\n@databricks.air.distributed(num_accelerators=1, "
    'accelerator_type="GPU_1xA10")\ndef train():\n    return 1\n'
)
CHANGES = [
    "AM101 change import serverless_gpu -> import databricks.air",
    "AM101 change serverless_gpu -> databricks.air",
    "AM102 change gpus= -> num_accelerators=",
    "AM102 change gpu_type= -> accelerator_type=",
    "AM103 change 'A10' -> 'GPU_1xA10'",
]


def _records(report: list) -> list:
    return [line.split(": ", 1)[1] for line in report]


def test_a_databricks_cell_with_a_bare_pip_line_is_migrated_as_the_same_jupyter_cell_is() -> None:
    source = "# Databricks notebook source\n" + CELL
    out, report = migrate(source, "train.py")
    assert out == "# Databricks notebook source\n" + AFTER  # the %pip line as written
    assert _records(report) == CHANGES
    jupyter_out, jupyter_report = migrate(notebook(CELL.rstrip("\n")), "train.ipynb")
    assert "".join(json.loads(jupyter_out)["cells"][1]["source"]) == AFTER.rstrip("\n")
    assert _records(jupyter_report) == CHANGES


def test_the_pip_line_is_still_reported_and_fixed_as_a_magic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nb.py"
    path.write_text(
        "# Databricks notebook source\n!pip install serverless_gpu\nfrom serverless_gpu import distributed\n"
    )
    assert run_cli(["--fix-pip", str(path)], capsys)[0] == 0
    assert path.read_text() == (
        "# Databricks notebook source\n!pip install databricks-sdk-air\nfrom databricks.air import distributed\n"
    )
    assert run_cli(["--check", str(path)], capsys) == (0, "")  # and nothing is left after the write


def test_write_then_check_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nb.py"
    path.write_text("# Databricks notebook source\n" + CELL)
    assert run_cli(["--check", str(path)], capsys)[0] == 1
    assert run_cli([str(path)], capsys)[0] == 0
    assert run_cli(["--check", str(path)], capsys) == (0, "")


@pytest.mark.parametrize(
    "cell",
    [
        'x = 1\nhelp = """\n%pip install serverless_gpu\n"""\n',  # parses: a string that reads like a magic
        "%pip install serverless_gpu \\\n    torch\nimport serverless_gpu\n",  # a magic over two lines
    ],
    ids=["string", "continued-magic"],
)
def test_a_cell_that_parses_or_cannot_be_masked_is_read_as_before(cell: str) -> None:
    out, report = migrate("# Databricks notebook source\n" + cell, "nb.py")
    if "help" in cell:  # (no AM110: the line is text of the string, and is only prose)
        assert out.endswith(cell)
        assert _records(report) == [
            "AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is"
        ]
    else:
        assert out.endswith(cell) and any(" AM902 manual cell skipped" in line for line in report)
