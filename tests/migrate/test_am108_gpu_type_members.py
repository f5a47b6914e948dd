"""AM108: GPUType.X to AcceleratorType.Y with its import adjusted, in scripts and across notebook cells."""

from __future__ import annotations

import json
from typing import List

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from rule_helpers import check_noop, check_transformed, migrate_result, migrate_text


def am108(report: List[str]) -> List[str]:
    return [line for line in report if ": AM108 " in line]


def changes(report: List[str]) -> List[str]:
    return [line for line in report if " change " in line or " review " in line]


GOLDEN = [
    pytest.param(
        "from serverless_gpu import distributed\n"
        "from serverless_gpu.compute import GPUType\n"
        "@distributed(gpus=8, gpu_type=GPUType.H100)\n"
        "def f(): ...\n",
        "from databricks.air import distributed\n"
        "from databricks.air.compute import AcceleratorType\n"
        "@distributed(num_accelerators=8, accelerator_type=AcceleratorType.GPU_8xH100)\n"
        "def f(): ...\n",
        id="imported-name-replaced",
    ),
    pytest.param(
        "from serverless_gpu import distributed\n"
        "from serverless_gpu.compute import GPUType as GT\n"
        "@distributed(gpus=1, gpu_type=GT.H100)\n"
        "def f(): ...\n"
        "print(GT.values())\n",
        "from databricks.air import distributed\n"
        "from databricks.air.compute import GPUType as GT, AcceleratorType\n"
        "@distributed(num_accelerators=1, accelerator_type=AcceleratorType.GPU_1xH100)\n"
        "def f(): ...\n"
        "print(GT.values())\n",
        id="alias-still-used-so-kept",
    ),
    pytest.param(
        "from serverless_gpu import distributed\n"
        "from serverless_gpu.compute import (\n"
        "    GPUType,  # the model\n"
        "    get_gpus_per_node,\n"
        ")\n"
        "@distributed(gpus=2, gpu_type=GPUType.A10)\n"
        "def f(): ...\n"
        "n = get_gpus_per_node(GPUType.A10)\n",
        "from databricks.air import distributed\n"
        "from databricks.air.compute import (\n"
        "    GPUType, AcceleratorType,  # the model\n"
        "    get_gpus_per_node,\n"
        ")\n"
        "@distributed(num_accelerators=2, accelerator_type=AcceleratorType.GPU_1xA10)\n"
        "def f(): ...\n"
        "n = get_gpus_per_node(GPUType.A10)\n",
        id="parenthesised-import-keeps-its-lines",
    ),
    pytest.param(
        "from databricks.air import distributed\n"
        "from databricks.air.compute import GPUType, AcceleratorType\n"
        "@distributed(num_accelerators=16, accelerator_type=GPUType.B300)\n"
        "def f(): ...\n",
        "from databricks.air import distributed\n"
        "from databricks.air.compute import AcceleratorType\n"
        "@distributed(num_accelerators=16, accelerator_type=AcceleratorType.GPU_8xB300)\n"
        "def f(): ...\n",
        id="already-imported-new-class",
    ),
    pytest.param(
        "import serverless_gpu as sg\n@sg.distributed(gpus=8, gpu_type=sg.compute.GPUType.H100)\ndef f(): ...\n",
        "import databricks.air as sg\n"
        "@sg.distributed(num_accelerators=8, accelerator_type=sg.compute.AcceleratorType.GPU_8xH100)\n"
        "def f(): ...\n",
        id="module-attribute-alias",
    ),
    pytest.param(
        "import serverless_gpu.compute\n"
        "from serverless_gpu import distributed\n"
        "distributed(gpus=1, gpu_type=serverless_gpu.compute.GPUType.A10)(f)\n",
        "import databricks.air.compute\n"
        "from databricks.air import distributed\n"
        "distributed(num_accelerators=1, accelerator_type=databricks.air.compute.AcceleratorType.GPU_1xA10)(f)\n",
        id="module-attribute-unaliased",
    ),
    pytest.param(
        "from serverless_gpu import compute, distributed\n"
        "train.with_overrides(gpu_type=compute.GPUType.H100, gpus=8)\n",
        "from databricks.air import compute, distributed\n"
        "train.with_overrides(accelerator_type=compute.AcceleratorType.GPU_8xH100, num_accelerators=8)\n",
        id="with-overrides-submodule",
    ),
]


@pytest.mark.parametrize("before, after", GOLDEN)
def test_gpu_type_members_become_accelerator_types_with_their_imports(before: str, after: str) -> None:
    report = check_transformed(before, after)
    manual = [line.split(" is ")[0] for line in report if " manual " in line or " blocking " in line]
    assert manual == (["job.py:8:23: AM108 manual GPUType.A10"] if "get_gpus_per_node(" in before else [])  # a use
    assert changes(check_noop(after)) == []  # outside a call; a second run changes nothing


def test_the_report_names_each_change_at_its_input_position() -> None:
    result = migrate_result(GOLDEN[1].values[0])
    assert am108([str(record) for record in result.records]) == [
        "job.py:2:1: AM108 change AcceleratorType imported next to GPUType, which is still used",
        "job.py:3:31: AM108 change GT.H100 -> AcceleratorType.GPU_1xH100",
    ]
    use = next(r for r in result.records if r.code == "AM108" and r.line == 3)
    assert (use.end_line, use.end_column, use.before, use.after) == (3, 38, "GT.H100", "AcceleratorType.GPU_1xH100")


def test_taking_gpu_type_out_of_a_plain_module_is_flagged_for_review() -> None:
    assert am108(migrate_text(GOLDEN[0].values[0])[1])[0] == (
        "job.py:2:1: AM108 review GPUType -> AcceleratorType in the import: no use of GPUType is left (check that no "
        "other module imports it from here)"
    )


@pytest.mark.parametrize(
    "call, code, message",
    [
        (
            "distributed(num_accelerators=n, accelerator_type=GPUType.H100)",
            "AM104",
            "GPUType.H100 maps to GPU_1xH100 or GPU_8xH100 depending on the count, which is not a literal here: write "
            "the accelerator type",
        ),
        (
            "distributed(gpus=4, gpu_type=GPUType.H100)",
            "AM105",
            "GPUType.H100 with 4 GPUs has no accelerator type: write one by hand",
        ),
        (
            "distributed(gpus=8, gpu_type=GPUType.h100)",
            "AM106",
            "GPU type GPUType.h100 is not mapped automatically: use one of ['GPU_1xA10', 'GPU_1xH100', 'GPU_8xH100', "
            "'GPU_8xB300']",
        ),
    ],
)
def test_what_has_no_exact_type_blocks_the_file_with_its_own_code(call: str, code: str, message: str) -> None:
    source = f"from serverless_gpu import distributed\nfrom serverless_gpu.compute import GPUType\n{call}(f)\n"
    report = check_noop(source)  # blocked: left as it is
    found = [line for line in report if ": AM10" in line and ": AM101 " not in line and ": AM102 " not in line]
    assert found == [f"job.py:3:{call.index('GPUType') + 1}: {code} blocking {message}"]
    partial = migrate_text(source, partial=True)[0]
    assert "import GPUType\n" in partial and "AcceleratorType" not in partial  # the use stays, so does its import


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "from serverless_gpu.compute import GPUType\nDEFAULT = GPUType.H100\n",
            "GPUType.H100 is used outside a distributed call and is left as it is (GPUType is deprecated: use "
            "AcceleratorType where a shape is meant)",
        ),
        (
            "try:\n    from serverless_gpu.compute import GPUType\nexcept ImportError:\n    GPUType = None\n"
            "from serverless_gpu import distributed\ndistributed(gpus=8, gpu_type=GPUType.H100)(f)\n",
            "GPUType is bound more than once here, so it is left as it is: use AcceleratorType",
        ),
        (
            "if find_spec('serverless_gpu'):\n    from serverless_gpu.compute import GPUType\n"
            "from serverless_gpu import distributed\ndistributed(gpus=8, gpu_type=GPUType.H100)(f)\n",
            "GPUType comes from a guarded import, so it is left as it is: use AcceleratorType",
        ),
        (
            "from serverless_gpu.compute import GPUType\nfrom mylib import AcceleratorType\n"
            "from serverless_gpu import distributed\ndistributed(gpus=8, gpu_type=GPUType.H100)(f)\n",
            "AcceleratorType already names something else here, so GPUType is left as it is",
        ),
        (
            "from serverless_gpu.compute import GPUType\nfrom . import AcceleratorType\n"
            "from serverless_gpu import distributed\ndistributed(gpus=8, gpu_type=GPUType.H100)(f)\n",
            "AcceleratorType already names something else here, so GPUType is left as it is",
        ),
    ],
    ids=["outside-a-call", "bound-twice", "guarded-import", "name-taken", "name-taken-relatively"],
)
def test_uses_that_cannot_be_rewritten_are_left_and_reported_without_blocking(source: str, message: str) -> None:
    result = migrate_result(source)
    assert [(r.severity, r.message) for r in result.records if r.code == "AM108"] == [("manual", message)]
    assert "AcceleratorType." not in migrate_text(source)[0]
    assert not result.blocked


def test_names_that_only_look_alike_are_not_touched() -> None:
    source = (
        "from serverless_gpu import distributed\n"
        "class GPUType:\n    H100 = 'mine'\n"
        "distributed(num_accelerators=8, accelerator_type=GPUType.H100)(f)\n"
        "other.GPUType.H100\n"
    )
    out, report = migrate_text(source)
    assert am108(report) == []
    assert "GPUType.H100)(f)" in out


DATABRICKS = (
    "# Databricks notebook source\n"
    "# MAGIC %pip install serverless_gpu\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "dbutils.library.restartPython()\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "from serverless_gpu import distributed\n"
    "from serverless_gpu.compute import GPUType\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "@distributed(gpus=8, gpu_type=GPUType.H100)\n"
    "def train(): ...\n"
)


def test_in_a_notebook_the_import_changes_in_its_own_cell_never_above_the_restart() -> None:
    after = DATABRICKS.replace(
        "from serverless_gpu import distributed\nfrom serverless_gpu.compute import GPUType\n",
        "from databricks.air import distributed\nfrom databricks.air.compute import AcceleratorType\n",
    ).replace("(gpus=8, gpu_type=GPUType.H100)", "(num_accelerators=8, accelerator_type=AcceleratorType.GPU_8xH100)")
    assert am108(check_transformed(DATABRICKS, after, path="nb.py")) == [
        "nb.py:cell 3:11:1: AM108 change GPUType -> AcceleratorType in the import: no use of GPUType is left",
        "nb.py:cell 4:15:31: AM108 change GPUType.H100 -> AcceleratorType.GPU_8xH100",
    ]
    assert changes(check_noop(after, path="nb.py")) == []  # a second run changes nothing


def test_a_use_in_any_later_cell_keeps_the_old_name_imported() -> None:
    source = DATABRICKS + "\n# COMMAND ----------\n\nprint(GPUType.A10)\n"
    text = migrate_text(source, "nb.py")[0]
    assert "from databricks.air.compute import GPUType, AcceleratorType\n" in text
    assert "accelerator_type=AcceleratorType.GPU_8xH100" in text and text.endswith("print(GPUType.A10)\n")


def test_a_mention_in_a_cell_no_rule_can_parse_counts_as_a_use() -> None:
    source = DATABRICKS + "\n# COMMAND ----------\n\npip install torch\nprint(GPUType.A10)\n"
    result = migrate_result(source, "nb.py")
    assert "from databricks.air.compute import GPUType, AcceleratorType\n" in migrate_text(source, "nb.py")[0]
    assert [r.code for r in result.records if r.cell == 5] == ["AM902"]


def test_an_alias_used_alone_in_a_later_cell_is_still_found() -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("from serverless_gpu import distributed\nfrom serverless_gpu.compute import GPUType as T"),
            new_markdown_cell("Train with `T.H100`"),
            new_code_cell("@distributed(gpus=8, gpu_type=T.H100)\ndef train(): ..."),
            new_code_cell("%time x = T.A10"),
        ],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    out, report = migrate_text(nbformat.writes(nb) + "\n", "nb.ipynb")
    cells = ["".join(cell["source"]) for cell in json.loads(out)["cells"]]
    assert (
        cells[0] == "from databricks.air import distributed\nfrom databricks.air.compute import GPUType as T, "
        "AcceleratorType"
    )
    assert cells[2] == "@distributed(num_accelerators=8, accelerator_type=AcceleratorType.GPU_8xH100)\ndef train(): ..."
    assert cells[3] == "%time x = T.A10"  # inside a magic: still a use, so T stays imported
    assert am108(report)[-1] == "nb.ipynb:cell 3:1:31: AM108 change T.H100 -> AcceleratorType.GPU_8xH100"
