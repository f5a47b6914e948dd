"""AM102: gpus= and gpu_type= renamed on distributed, ray_launch and with_overrides, by scope."""

from __future__ import annotations

import pytest
from rule_helpers import check_noop, check_transformed, person_items

AM102 = ("AM102",)


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "from serverless_gpu import distributed\n@distributed(gpus=8, gpu_type='H100', remote=True)\ndef f(): ...\n",
            "from serverless_gpu import distributed\n"
            "@distributed(num_accelerators=8, accelerator_type='H100', remote=True)\ndef f(): ...\n",
        ),
        (
            "import serverless_gpu as sg\n@sg.distributed(gpus = 2)\ndef f(): ...\n",
            "import serverless_gpu as sg\n@sg.distributed(num_accelerators = 2)\ndef f(): ...\n",
        ),
        (
            "from databricks.air import ray_launch as rl\nrl(gpus=N_GPUS)(train)\n",
            "from databricks.air import ray_launch as rl\nrl(num_accelerators=N_GPUS)(train)\n",
        ),
        ("train.with_overrides(gpus=4)\n", "train.with_overrides(num_accelerators=4)\n"),
        (
            "from serverless_gpu import distributed\n@distributed(\n    gpus=8,  # all of them\n    gpu_type=T,\n)\ndef f(): ...\n",
            "from serverless_gpu import distributed\n"
            "@distributed(\n    num_accelerators=8,  # all of them\n    accelerator_type=T,\n)\ndef f(): ...\n",
        ),
    ],
)
def test_old_keywords_are_renamed_keeping_values_and_formatting(before: str, after: str) -> None:
    report = check_transformed(before, after, AM102)
    assert report and not person_items(report)
    assert check_noop(after, AM102) == []


def test_other_functions_of_the_same_name_are_not_touched() -> None:
    source = (
        "import torch.distributed as distributed\n"
        "distributed.init_process_group(gpus=2)\n"
        "def distributed_job(gpus): ...\n"
        "distributed_job(gpus=2)\n"
    )
    assert check_noop(source, AM102) == []


def test_after_am101_the_same_calls_still_resolve() -> None:
    check_transformed(
        "from serverless_gpu import distributed as d\nd(gpus=1)(f)\n",
        "from databricks.air import distributed as d\nd(num_accelerators=1)(f)\n",
        ("AM101", "AM102"),
    )


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "from serverless_gpu import distributed\ndistributed(gpus=2, num_accelerators=2)(f)\n",
            "both gpus= and num_accelerators= are given: keep one by hand",
        ),
        (
            "from serverless_gpu import distributed\ndistributed(**options)(f)\n",
            "keywords passed through ** cannot be checked for gpus/gpu_type",
        ),
    ],
)
def test_calls_that_cannot_be_confirmed_are_reported_and_left(source: str, message: str) -> None:
    assert check_noop(source, AM102) == [f"job.py:2:1: AM102 blocking {message}"]
