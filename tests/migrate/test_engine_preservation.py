"""The engine end to end: bytes kept outside changes, notebook cells and magics, skipped cells, safety checks."""

from __future__ import annotations

import json
from typing import Any, List

import libcst
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.engine import FileResult, migrate_file
from air_migrate.rules import REGISTRY
from air_migrate.rule_base import Rule

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
PYTHON_KERNEL = {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}


def migrate(data: bytes, path: str = "job.py", **options: Any) -> FileResult:
    return migrate_file(path, data, RULES, **options)


def assert_second_run_is_a_no_op(result: FileResult, path: str) -> None:
    assert result.migrated is not None
    again = migrate(result.migrated, path)
    assert again.migrated is None and not [r for r in again.records if r.severity in ("change", "review")]


SCRIPT = (
    "\ufeff#!/usr/bin/env python\r\n"
    "from serverless_gpu import (  \r\n"
    "\tdistributed,  # keep me\r\n"
    "\truntime as rt,\r\n"
    ")\r\n"
    "\r\n"
    "@distributed(\r\n"
    "\tgpus=8,   # all of them\r\n"
    "\tgpu_type='H100',\r\n"
    ")\r\n"
    "def train():  \r\n"
    "\treturn rt.rank()"
)


def test_a_script_keeps_every_byte_outside_the_changed_nodes() -> None:
    result = migrate(SCRIPT.encode())
    expected = (
        SCRIPT.replace("serverless_gpu", "databricks.air")
        .replace("gpus=", "num_accelerators=")
        .replace("gpu_type='H100'", "accelerator_type='GPU_8xH100'")
    )
    assert result.migrated == expected.encode()  # BOM, CRLF, tabs, trailing spaces, comments, no final newline
    assert_second_run_is_a_no_op(result, "job.py")


DATABRICKS = (
    "# Databricks notebook source\n"
    "# DBTITLE 1,Setup\n"
    "# MAGIC %pip install torch\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "from serverless_gpu import distributed\n"
    "# # COMMAND ----------\n"
    "#COMMAND ----------\n"
    "x = 1\n"
    "# COMMAND ----------\n"
    "pip install torch\n"  # (automagic: no % sign, so not a magic either)
    "import serverless_gpu\n"
    "\n"
    "# COMMAND ----------\n"
    "# DBTITLE 1,Train\n"
    "@distributed(gpus=2, gpu_type='A10')\n"
    "def train(): ...\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "# MAGIC %md\n"
    "# MAGIC serverless_gpu is old\n"
)


def test_a_databricks_source_keeps_its_cells_separators_and_magic_lines() -> None:
    result = migrate(DATABRICKS.encode(), "nb.py")
    assert result.migrated is not None
    out = result.migrated.decode()
    assert out == DATABRICKS.replace("from serverless_gpu", "from databricks.air").replace(
        "(gpus=2, gpu_type='A10')", "(num_accelerators=2, accelerator_type='GPU_1xA10')"
    )
    before_cells = DATABRICKS.split("\n# COMMAND ----------\n")
    after_cells = out.split("\n# COMMAND ----------\n")
    assert len(after_cells) == len(before_cells) == 5  # the commented-out lookalikes do not split
    assert [a == b for a, b in zip(before_cells, after_cells)] == [True, False, True, False, True]
    assert_second_run_is_a_no_op(result, "nb.py")


def test_a_cell_that_is_not_python_is_reported_and_the_others_still_migrate() -> None:
    result = migrate(DATABRICKS.encode(), "nb.py")
    (skipped,) = [r for r in result.records if r.code == "AM902"]
    assert (skipped.cell, skipped.line, skipped.column, skipped.severity) == (3, 12, 1, "manual")
    assert skipped.message == (
        "cell skipped: it is not valid Python (a bare shell or magic line such as `%cd` or `pip install`?), so nothing "
        "in it is migrated: check it by hand"
    )
    assert not result.blocked


def _notebook(cells: List[Any], **metadata: Any) -> bytes:
    nb = new_notebook(cells=cells, metadata=metadata or PYTHON_KERNEL)
    return (nbformat.writes(nb) + "\n").encode()


def _sources(data: bytes) -> List[str]:
    return ["".join(cell["source"]) for cell in json.loads(data)["cells"]]


NOTEBOOK_CELLS = [
    "# %%capture\nfrom serverless_gpu import distributed",
    "%%capture out\n@distributed(gpus=1, gpu_type='H100')\ndef f(): ...",
    "files = !ls\nif True:\n    %time f.distributed()\n    !echo serverless_gpu\n    distributed(gpus=2)(f)",
    "%%bash\necho serverless_gpu",
    "%%bash\necho hi",
    "%pip install \\\n  torch",
]


def test_notebook_cells_migrate_around_their_magics_which_come_back_exactly() -> None:
    data = _notebook([new_markdown_cell("serverless_gpu"), *map(new_code_cell, NOTEBOOK_CELLS)])
    result = migrate(data, "nb.ipynb")
    assert result.migrated is not None
    assert (
        _sources(result.migrated)
        == [
            "serverless_gpu",
            "# %%capture\nfrom databricks.air import distributed",  # a commented-out magic is a comment
            "%%capture out\n@distributed(num_accelerators=1, accelerator_type='GPU_1xH100')\ndef f(): ...",
            "files = !ls\nif True:\n    %time f.distributed()\n    !echo serverless_gpu\n"
            "    distributed(num_accelerators=2)(f)",
            *NOTEBOOK_CELLS[3:],
        ]
    )
    before, after = json.loads(data), json.loads(result.migrated)
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    assert sorted(result.cells) == [2, 3, 4]
    assert_second_run_is_a_no_op(result, "nb.ipynb")


def test_skipped_notebook_cells_are_reported_only_when_they_mention_the_old_package() -> None:
    result = migrate(_notebook(list(map(new_code_cell, NOTEBOOK_CELLS))), "nb.ipynb")
    skipped = [(r.cell, r.severity, r.message) for r in result.records if r.code == "AM901"]
    assert skipped == [(4, "manual", "cell skipped: the cell magic %%bash does not hold Python")]


def test_a_notebook_in_another_language_is_left_alone() -> None:
    kernel = {"name": "ir", "language": "R", "display_name": "R"}
    data = _notebook([new_code_cell("library(serverless_gpu)")], kernelspec=kernel)
    result = migrate(data, "nb.ipynb")
    assert result.relevant and result.migrated is None and result.records == []


@pytest.mark.parametrize(
    "source, relevant",
    [
        ("from databricks.air.compute import GPUType\nx = GPUType.A10\n", True),
        ("import torch.distributed as dist\ndist.init_process_group('gloo')\n", False),
        ("num_gpus = 8\nparser.add_argument('--gpus', type=int)\nif gpu_type == 'a100': pass\n", False),
        ("train.with_overrides(gpus = 2)\n", True),
    ],
)
def test_the_text_check_lets_through_what_a_rule_can_act_on(source: str, relevant: bool) -> None:
    result = migrate(source.encode())
    assert result.relevant is relevant
    assert bool(result.records) is relevant


def test_a_pip_line_in_any_case_makes_a_notebook_worth_a_look() -> None:
    result = migrate(_notebook([new_code_cell("%pip install Serverless-GPU")]), "nb.ipynb")
    assert result.relevant and [r.code for r in result.records] == ["AM110"]


def test_a_cell_that_only_uses_an_alias_from_an_earlier_cell_is_still_checked() -> None:
    data = _notebook(
        [new_code_cell("from serverless_gpu import distributed as launch"), new_code_cell("launch(**o)(f)")]
    )
    result = migrate(data, "nb.ipynb")
    assert [(r.cell, r.code, r.severity) for r in result.records] == [(1, "AM101", "change"), (2, "AM102", "blocking")]
    assert result.migrated is None


class _BrokenRule(Rule):
    """A rule with a bug: it writes code that does not parse."""

    CODE = "AM999"
    DESCRIPTION = "test only"

    def leave_Assign(self, original_node: libcst.Assign, updated_node: libcst.Assign) -> libcst.Assign:
        target = updated_node.targets[0].with_changes(target=libcst.Integer("1"))
        return updated_node.with_changes(targets=[target])  # `1 = 1`


def test_a_cell_a_rule_broke_is_never_written() -> None:
    result = migrate_file("job.py", b"import serverless_gpu\nx = 1\n", [*RULES, _BrokenRule])
    assert result.migrated is None and result.cells == {}
    assert result.error == "internal error: the migrated cell 1 would not parse, so the file is left as it is"


def test_unchanged_files_give_no_new_bytes() -> None:
    result = migrate(b"# moved off serverless_gpu\nfrom databricks.air import distributed\ndistributed()(f)\n")
    assert result.relevant and result.migrated is None and result.records == []


def test_nothing_leaks_from_one_file_into_the_next() -> None:
    first = migrate(b"from serverless_gpu.compute import GPUType\nprint(GPUType.A10)\n")
    second = migrate(b"from serverless_gpu.compute import GPUType\n")
    assert [r.code for r in first.records] == ["AM101", "AM108"]
    assert [r.code for r in second.records] == ["AM101"]


def test_names_resolve_across_cells_from_the_imports_as_they_were_read() -> None:
    source = (
        "# Databricks notebook source\nimport serverless_gpu\n\n# COMMAND ----------\n\n"
        "@serverless_gpu.distributed(gpus=2)\ndef f(): ...\n"
    )
    result = migrate(source.encode(), "nb.py")
    assert (
        result.migrated
        == source.replace("serverless_gpu", "databricks.air").replace("gpus=", "num_accelerators=").encode()
    )
    assert [(r.cell, r.line, r.column, r.code) for r in result.records] == [
        (1, 2, 1, "AM101"),
        (2, 6, 2, "AM101"),
        (2, 6, 29, "AM102"),
    ]
