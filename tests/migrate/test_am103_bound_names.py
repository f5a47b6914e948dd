"""A GPU type (or count) given through a name bound to a literal in the same file:
``GPU_TYPE = "H100"`` at module level or in an earlier notebook cell, then ``gpu_type=GPU_TYPE``. The literal is
rewritten when every use of the name is a GPU type; otherwise each call is reported (AM109), never silently."""

from __future__ import annotations

import json

import pytest
from cli_fixtures import notebook
from rule_helpers import check_noop, check_transformed, migrate_text, person_items

from air_migrate.todo_markers import LEFT_NOTE

IMPORT = "from serverless_gpu import distributed\n"
SEPARATOR = "\n# COMMAND ----------\n\n"


def databricks(*cells: str) -> str:
    return "# Databricks notebook source\n" + SEPARATOR.join(cells)


def test_a_module_level_name_used_only_as_the_gpu_type_has_its_literal_rewritten() -> None:
    source = f'{IMPORT}\nGPU_TYPE = "H100"\n\n\n@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef train():\n    return 1\n'
    expected = (
        'from databricks.air import distributed\n\nGPU_TYPE = "GPU_8xH100"\n\n\n'
        "@distributed(num_accelerators=8, accelerator_type=GPU_TYPE)\ndef train():\n    return 1\n"
    )
    report = check_transformed(source, expected)
    assert report[1] == (
        "job.py:3:12: AM103 review 'H100' -> 'GPU_8xH100': GPU_TYPE is only used as the GPU type of the call(s) on "
        "line 6 (check that no other module imports GPU_TYPE from here)"
    )
    assert check_noop(expected) == []


def test_a_name_of_an_earlier_notebook_cell_and_a_count_given_by_name_are_followed() -> None:
    source = databricks(
        'GPU_TYPE = "h100"\nNUM_GPUS: int = 16\n',
        IMPORT,
        "@distributed(gpus=NUM_GPUS, gpu_type=GPU_TYPE)\ndef train():\n    return 1\n",
    )
    out, report = migrate_text(source, "notebook.py")
    assert out == source.replace('"h100"', '"GPU_8xH100"').replace("serverless_gpu", "databricks.air").replace(
        "gpus=NUM_GPUS, gpu_type=", "num_accelerators=NUM_GPUS, accelerator_type="
    )
    assert (
        "notebook.py:cell 1:2:12: AM103 change 'h100' -> 'GPU_8xH100': GPU_TYPE is only used as the GPU type of "
        "the call(s) in cell 3" in report
    )
    assert check_noop(out, path="notebook.py") == []


def test_a_jupyter_notebook_name_is_followed_across_cells() -> None:
    source = notebook("GPU_TYPE = 'A10'", IMPORT + "@distributed(gpus=2, gpu_type=GPU_TYPE)\ndef f(): ...")
    out, report = migrate_text(source, "nb.ipynb")
    cells = ["".join(cell["source"]) for cell in json.loads(out)["cells"][1:]]
    assert cells == [
        "GPU_TYPE = 'GPU_1xA10'",
        "from databricks.air import distributed\n@distributed(num_accelerators=2, "
        "accelerator_type=GPU_TYPE)\ndef f(): ...",
    ]
    assert not person_items(report)


def test_the_new_keyword_with_an_old_value_in_a_name_is_rewritten_too() -> None:
    source = (
        'from databricks.air import distributed\nGPU = "B300"\n\n@distributed(accelerator_type=GPU)\ndef f(): ...\n'
    )
    out, _ = migrate_text(source)
    assert out == source.replace('"B300"', '"GPU_8xB300"')


USED_ELSEWHERE = [
    ("print(GPU_TYPE)\n", "GPU_TYPE ('H100') is also used on line 7 for something other than a GPU type"),
    (
        "cluster = make_cluster(gpu_type=GPU_TYPE)\n",
        "GPU_TYPE ('H100') is also used on line 7 for something other than a GPU type",
    ),
    (
        "@distributed(gpus=1, gpu_type=GPU_TYPE)\ndef g(): ...\n",
        "GPU_TYPE ('H100') is the GPU type of calls that need different accelerator types (GPU_1xH100 and GPU_8xH100)",
    ),
    ("N = GPU_TYPE.lower()\n", "GPU_TYPE ('H100') is also used on line 7 for something other than a GPU type"),
]


@pytest.mark.parametrize("other, why", USED_ELSEWHERE, ids=["print", "other call", "two shapes", "method"])
def test_a_name_also_used_otherwise_is_left_and_reported_at_each_call_every_run(other: str, why: str) -> None:
    source = f'{IMPORT}\nGPU_TYPE = "H100"\n\n@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef f(): ...\n{other}'
    out, report = migrate_text(source)
    assert 'GPU_TYPE = "H100"' in out and "(num_accelerators=8, accelerator_type=GPU_TYPE)" in out
    items = person_items(report)
    assert items[0] == f'AM109 manual {why}, so it is left as it is: write accelerator_type="GPU_8xH100" here'
    assert out.count("# TODO(air-migrate AM109): ") == len(items)  # the changed decorator holds its item
    # After the write too, never silent: found again (the marker above the decorator moved the rest down a line).
    assert person_items(migrate_text(out)[1]) == [item.replace("line 7", "line 8") for item in items]


@pytest.mark.parametrize(
    "binding, why",
    [
        ("GPU_TYPE = cfg.gpu\nGPU_TYPE = cfg.other\n", "GPU_TYPE is bound more than once in this file"),
        (
            "from settings import GPU_TYPE\n",
            "GPU_TYPE is not bound to a string literal (it is imported, computed or set in a loop)",
        ),
        (
            'GPU_TYPE = dbutils.widgets.get("gpu")\n',
            "GPU_TYPE is not bound to a string literal (it is imported, computed or set in a loop)",
        ),
        ("", "GPU_TYPE is not bound in this file (imported from another module, or set by a %run notebook?)"),
        (
            'for GPU_TYPE in ["H100"]:\n    pass\n',
            "GPU_TYPE is not bound to a string literal (it is imported, computed or set in a loop)",
        ),
    ],
    ids=["twice", "imported", "computed", "unbound", "loop"],
)
def test_a_name_not_bound_to_one_literal_is_reported_on_the_old_keyword(binding: str, why: str) -> None:
    source = f"{IMPORT}{binding}\n@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef f(): ...\n"
    out, report = migrate_text(source)
    item = (
        f"AM109 manual {why}, so air-migrate cannot tell whether it is an old GPU model name (which the runtime "
        "warns about): make sure its value is an accelerator type such as 'GPU_8xH100'"
    )
    assert person_items(report) == [item]
    # The keyword is renamed, and the marker above the decorator keeps the item reported on every later run.
    marker = "# TODO(air-migrate AM109): " + item.split(" manual ", 1)[1]
    assert out == source.replace("serverless_gpu", "databricks.air").replace(
        "gpus=8, gpu_type=", "num_accelerators=8, accelerator_type="
    ).replace("\n@", f"\n{marker}\n@")
    assert person_items(migrate_text(out)[1]) == [item + LEFT_NOTE]


@pytest.mark.parametrize("keyword", ["gpu_type", "accelerator_type"])
def test_a_name_bound_more_than_once_to_an_old_model_is_reported_on_either_keyword(keyword: str) -> None:
    source = (
        f'{IMPORT}GPU_TYPE = "H100"\nif small:\n    GPU_TYPE = "A10"\n'
        f"@distributed(gpus=8, {keyword}=GPU_TYPE)\ndef f(): ...\n"
    )
    out, report = migrate_text(source)
    assert "accelerator_type=GPU_TYPE" in out
    expected = (
        "AM109 manual GPU_TYPE is bound more than once in this file, among them to the old GPU model name "
        "'A10' and 'H100' (which the runtime warns about), so it is left as it is: give it, or this call, an "
        "accelerator type such as 'GPU_8xH100'"
    )
    assert person_items(report) == [expected]
    assert person_items(migrate_text(out)[1]) == [expected]  # the second run too


def test_a_name_bound_in_a_later_cell_or_read_in_an_unparsed_cell_is_kept() -> None:
    later = databricks(IMPORT + "@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef f(): ...\n", 'GPU_TYPE = "H100"\n')
    assert person_items(migrate_text(later, "n.py")[1]) == [
        "AM109 manual GPU_TYPE ('H100') is used before the statement that binds it, so it is left as it is: write "
        'accelerator_type="GPU_8xH100" here'
    ]
    magic = notebook(
        'GPU_TYPE = "H100"', "%time print(GPU_TYPE)", IMPORT + "@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef f(): ..."
    )
    assert person_items(migrate_text(magic, "n.ipynb")[1]) == [
        "AM109 manual GPU_TYPE ('H100') also appears in a cell or magic air-migrate cannot read, so it is left as it "
        'is: write accelerator_type="GPU_8xH100" here'
    ]


def test_a_name_that_is_no_model_blocks_as_its_literal_would() -> None:
    source = f'{IMPORT}GPU_TYPE = "H200"\n@distributed(gpus=8, gpu_type=GPU_TYPE)\ndef f(): ...\n'
    report = check_noop(source)
    assert person_items(report) == [
        "AM106 blocking GPU type GPU_TYPE ('H200') is not mapped automatically: use one of ['GPU_1xA10', "
        "'GPU_1xH100', 'GPU_8xH100', 'GPU_8xB300']"
    ]


def test_an_h100_name_needs_a_count_that_is_known() -> None:
    source = (
        f'{IMPORT}import os\nGPU_TYPE = "H100"\nN = int(os.environ["N"])\n'
        "@distributed(gpus=N, gpu_type=GPU_TYPE)\ndef f(): ...\n"
    )
    assert person_items(migrate_text(source)[1]) == [
        "AM104 blocking GPU_TYPE ('H100') maps to GPU_1xH100 or GPU_8xH100 depending on the count, which is not a "
        "literal here: write the accelerator type"
    ]


def test_a_local_variable_or_an_expression_on_the_old_keyword_is_reported() -> None:
    source = (
        f"{IMPORT}def main(cfg):\n    gpu = 'H100'\n\n    @distributed(gpus=8, gpu_type=gpu)\n    def f(): ...\n\n"
        "    @distributed(gpus=8, gpu_type=cfg['gpu'])\n    def g(): ...\n"
    )
    out, report = migrate_text(source)
    assert "accelerator_type=gpu)" in out and "gpu = 'H100'" in out
    assert [item.split(":")[0] for item in person_items(report)] == [
        "AM109 manual gpu_type=gpu",
        "AM109 manual gpu_type=cfg['gpu'] is not a literal, so air-migrate cannot tell whether it is an old GPU model name (which the runtime warns about)",
    ]


def test_the_new_keyword_with_a_value_it_cannot_follow_is_left_quiet() -> None:
    source = (
        "from databricks.air import distributed\nfrom settings import TYPE\n\n"
        "@distributed(accelerator_type=TYPE)\ndef f(): ...\n@distributed(accelerator_type=cfg.type)\ndef g(): ...\n"
    )
    assert check_noop(source) == []


def test_a_name_bound_to_a_gpu_type_member_is_left_to_am108() -> None:
    source = (
        "from serverless_gpu import distributed\nfrom serverless_gpu.compute import GPUType\n"
        "GPU = GPUType.H100\n@distributed(gpus=8, gpu_type=GPU)\ndef f(): ...\n"
    )
    assert [item.split(" ", 2)[:2] for item in person_items(migrate_text(source)[1])] == [["AM108", "manual"]]


def test_a_function_that_rebinds_the_name_as_global_counts_and_one_with_a_local_of_that_name_does_not() -> None:
    head = f'{IMPORT}GPU_TYPE = "A10"\n@distributed(gpus=2, gpu_type=GPU_TYPE)\ndef f(): ...\n'
    local = head + 'def configure():\n    GPU_TYPE = "H100"\n    return GPU_TYPE\n'
    assert 'GPU_TYPE = "GPU_1xA10"' in migrate_text(local)[0]
    rebinding = head + 'def configure():\n    global GPU_TYPE\n    GPU_TYPE = "H100"\n'
    out, report = migrate_text(rebinding)
    assert 'GPU_TYPE = "A10"' in out
    assert person_items(report)[0].startswith("AM109 manual GPU_TYPE is bound more than once in this file")
