"""AM103 and its reports AM104 to AM108: GPU type values on distributed calls."""

from __future__ import annotations

from typing import Optional

import libcst
import pytest
from rule_helpers import apply, check_noop, check_transformed, items

from air_migrate.rules import REGISTRY
from air_migrate.rules.accelerator_types import accelerator_type_for
from databricks.air.compute import AcceleratorType, GPUType


AM103 = ("AM103",)


@pytest.mark.parametrize(
    "model, count, expected",
    [
        ("A10", None, "GPU_1xA10"),
        ("A10", 4, "GPU_1xA10"),
        ("B300", None, "GPU_8xB300"),
        ("B300", 16, "GPU_8xB300"),
        ("H100", 1, "GPU_1xH100"),
        ("H100", 8, "GPU_8xH100"),
        ("H100", 64, "GPU_8xH100"),
        ("H100", None, None),
        ("H100", 4, None),
        ("H100", 0, None),
        ("h100", 8, None),
    ],
)
def test_the_mapping_table(model: str, count: Optional[int], expected: Optional[str]) -> None:
    assert accelerator_type_for(model, count) == expected


@pytest.mark.parametrize("model, count", [("A10", 1), ("A10", 3), ("B300", 8), ("H100", 1), ("H100", 8), ("H100", 16)])
def test_the_table_agrees_with_the_runtime(model: str, count: int) -> None:
    runtime = AcceleratorType.from_gpu_type(GPUType[model], count).value
    assert accelerator_type_for(model, count) == runtime


HEADER = "from databricks.air import distributed\n"


@pytest.mark.parametrize(
    "call, expected",
    [
        (
            '@distributed(num_accelerators=8, accelerator_type="H100")',
            '@distributed(num_accelerators=8, accelerator_type="GPU_8xH100")',
        ),
        ("@distributed(gpus=1, gpu_type='H100')", "@distributed(gpus=1, gpu_type='GPU_1xH100')"),
        ('@distributed(accelerator_type="A10")', '@distributed(accelerator_type="GPU_1xA10")'),
        (
            "@distributed(num_accelerators=16, accelerator_type=r'B300')",
            "@distributed(num_accelerators=16, accelerator_type=r'GPU_8xB300')",
        ),
    ],
)
def test_literal_types_are_mapped_with_the_literal_count(call: str, expected: str) -> None:
    after = f"{HEADER}{expected}\ndef f(): ...\n"
    report = check_transformed(f"{HEADER}{call}\ndef f(): ...\n", after, AM103)
    assert [item.split(" ", 2)[:2] for item in items(report)] == [["AM103", "change"]]
    assert check_noop(after, AM103) == []  # a second run reports nothing


@pytest.mark.parametrize(
    "call, code",
    [
        ('@distributed(num_accelerators=n, accelerator_type="H100")', "AM104"),
        ('@distributed(accelerator_type="H100")', "AM104"),
        ('@distributed(num_accelerators=4, accelerator_type="H100")', "AM105"),
        ('@distributed(accelerator_type="h100")', "AM104"),
        ('@distributed(accelerator_type="H200")', "AM106"),
        ('@distributed(accelerator_type="A100")', "AM106"),
        ('@distributed(accelerator_type=f"{model}")', "AM107"),
    ],
)
def test_what_cannot_be_mapped_exactly_is_reported_with_its_code(call: str, code: str) -> None:
    source = f"{HEADER}{call}\ndef f(): ...\n"
    assert [item.split(" ", 2)[:2] for item in items(check_noop(source, AM103))] == [[code, "blocking"]]


def test_gpu_type_members_are_left_to_am108() -> None:
    source = (
        "from serverless_gpu import distributed\nfrom serverless_gpu.compute import GPUType\n"
        "@distributed(gpus=8, gpu_type=GPUType.H100)\ndef f(): ...\n"
    )
    assert check_noop(source, AM103) == []


def test_the_quotes_of_the_literal_are_kept() -> None:
    check_transformed(
        f'{HEADER}distributed(accelerator_type="""A10""", num_accelerators=1)(f)\n',
        f'{HEADER}distributed(accelerator_type="""GPU_1xA10""", num_accelerators=1)(f)\n',
        AM103,
    )


def test_the_change_is_reported_with_the_literal_before_and_after() -> None:
    _, findings = apply(REGISTRY["AM103"], libcst.parse_module(f"{HEADER}distributed(accelerator_type='B300')(f)\n"))
    assert [(f.line, f.column, f.end_column, f.before, f.after) for f in findings] == [
        (2, 30, 36, "'B300'", "'GPU_8xB300'")
    ]


def test_new_values_and_other_calls_are_left_alone() -> None:
    source = (
        f'{HEADER}@distributed(accelerator_type="GPU_8xH100")\ndef f(): ...\n'
        'make_cluster(accelerator_type="H100")\n'
        '@distributed(accelerator_type="CPU")\ndef g(): ...\n'
    )
    assert check_noop(source, AM103) == []


def test_unmappable_values_block_the_file_and_string_mentions_do_not() -> None:
    _, raw = apply(REGISTRY["AM103"], libcst.parse_module(f'{HEADER}distributed(accelerator_type="h200")(f)\n'))
    assert [f.severity for f in raw] == ["blocking"]
    _, strings = apply(REGISTRY["AM101"], libcst.parse_module('"""Uses serverless_gpu."""\n'))
    assert [f.severity for f in strings] == ["info"]  # a note
