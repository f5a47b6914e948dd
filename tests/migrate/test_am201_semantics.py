"""What the TorchDistributor rewrite keeps that a reader might not see: no time limit
(``timeout=None``, reported for review), distributors rebound cell by cell, a count held in a variable, and every
comment of what is taken out."""

from __future__ import annotations

import io
import json
import tokenize
from typing import List

import pytest
from cli_fixtures import notebook
from rule_helpers import check_noop, migrate_text, person_items

IMPORT = "from pyspark.ml.torch.distributor import TorchDistributor\n"
SEPARATOR = "\n# COMMAND ----------\n\n"


# --- no time limit, as before ---------------------------------------------------------------------------


def test_the_new_decorator_keeps_no_time_limit_in_plain_sight_and_says_how_to_choose_a_cap() -> None:
    source = f"{IMPORT}\n\ndef fine_tune(epochs):\n    return epochs\n\n\nTorchDistributor(num_processes=8).run(fine_tune, 3)\n"
    out, report = migrate_text(source)
    assert "@distributed(num_accelerators=8, timeout=None)\ndef fine_tune(epochs):" in out
    assert (
        "job.py:4:1: AM218 review timeout=None keeps TorchDistributor.run's behaviour: no time limit. Without "
        "it, @distributed stops a call after 3 hours (timeout=10800 s) and raises LocalExecutionTimeoutError; "
        "to cap fine_tune, write timeout=SECONDS, the longest run you expect with a margin" in report
    )
    assert check_noop(out) == []


@pytest.mark.parametrize(
    "arguments, decorator",
    [
        ("torch.cuda.device_count()", "@distributed(timeout=None)"),
        ("2, use_gpu=False", '@distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)'),
    ],
)
def test_every_decorator_form_says_timeout_none(arguments: str, decorator: str) -> None:
    source = f"import torch\n{IMPORT}\ndef train():\n    return 1\n\nTorchDistributor({arguments}).run(train)\n"
    assert f"{decorator}\ndef train():" in migrate_text(source)[0]


# --- a distributor rebound cell by cell, a count held in a variable ---------------------------------------


def databricks(*cells: str) -> str:
    return "# Databricks notebook source\n" + SEPARATOR.join(cells)


FUNCTIONS = "def a():\n    return 1\n\n\ndef b():\n    return 2\n"
REBOUND = [
    "d = TorchDistributor(num_processes=2, local_mode=True, use_gpu=True)\nd.run(a)\n",
    "d = TorchDistributor(num_processes=4, local_mode=True, use_gpu=True)\nd.run(b)\n",
]


def test_a_distributor_rebound_in_each_cell_with_its_own_runs_is_rewritten() -> None:
    source = databricks(IMPORT + "\n" + FUNCTIONS, *REBOUND)
    out, report = migrate_text(source, "nb.py")
    assert out == databricks(
        "from databricks.air import distributed\n\n@distributed(num_accelerators=2, timeout=None)\n"
        "def a():\n    return 1\n\n\n@distributed(num_accelerators=4, timeout=None)\ndef b():\n    return 2\n",
        "a.distributed()\n",
        "b.distributed()\n",
    )
    assert not person_items(report)
    assert sum(" AM205 change d = TorchDistributor(...) removed" in line for line in report) == 2


def test_a_jupyter_notebook_rebinding_its_distributor_in_the_same_cell_is_rewritten_too() -> None:
    source = notebook(IMPORT + FUNCTIONS, "".join(REBOUND))
    out, report = migrate_text(source, "nb.ipynb")
    cells = ["".join(cell["source"]) for cell in json.loads(out)["cells"][1:]]
    assert cells[1] == "a.distributed()\nb.distributed()\n"
    assert not person_items(report)


@pytest.mark.parametrize(
    "cells",
    [
        [REBOUND[0], "def later():\n    d.run(b)\n", REBOUND[1]],  # a use that waits in a function
        ["d.run(a)\n", *REBOUND],  # a use before the first binding
        [REBOUND[0], "for _ in range(2):\n    d = TorchDistributor(4)\n    d.run(a)\n", "d.run(b)\n"],  # in a loop
    ],
    ids=["deferred use", "use before", "loop"],
)
def test_a_rebound_distributor_whose_uses_cannot_be_told_apart_is_blocked(cells: List[str]) -> None:
    source = databricks(IMPORT + "\n" + FUNCTIONS, *cells)
    report = check_noop(source, path="nb.py")
    assert person_items(report) and all(
        item.startswith("AM212 blocking d is bound more than once") for item in person_items(report)
    )


def test_a_binding_in_a_loop_whose_runs_follow_other_bindings_at_once_is_left_and_the_runs_rewritten() -> None:
    cells = [REBOUND[0], "for _ in range(2):\n    d = TorchDistributor(4)\n", REBOUND[1]]
    out, report = migrate_text(databricks(IMPORT + "\n" + FUNCTIONS, *cells), "nb.py")
    assert "a.distributed()\n" in out and "b.distributed()\n" in out and "    d = TorchDistributor(4)\n" in out
    assert IMPORT in out  # the loop's distributor still needs it
    assert person_items(report) == [
        "AM212 manual d = TorchDistributor(...) is never run in this file, so it is left "
        "as it is (and so is its import): remove it if nothing else uses it"
    ]


def test_one_function_run_by_two_rebound_distributors_of_different_sizes_is_blocked() -> None:
    source = databricks(IMPORT + "\n" + FUNCTIONS, REBOUND[0], REBOUND[1].replace("d.run(b)", "d.run(a)"))
    items = person_items(migrate_text(source, "nb.py")[1])
    assert [item.split(" ", 2)[:2] for item in items] == [["AM210", "blocking"]] * 2


COUNTS = [
    ("n = torch.cuda.device_count()\n", ""),
    ("n: int = torch.cuda.device_count()\n", ""),
    ("from torch.cuda import device_count\nn = device_count()\n", ""),
]


@pytest.mark.parametrize("binding, _", COUNTS, ids=["plain", "annotated", "imported function"])
def test_a_name_bound_once_to_the_device_count_is_every_gpu_as_the_inline_form_is(binding: str, _: str) -> None:
    source = databricks(
        f"import torch\n{IMPORT}{binding}",
        "def train():\n    return 1\n",
        'print(f"{n} GPUs")\nTorchDistributor(num_processes=n).run(train)\n',
    )
    out, report = migrate_text(source, "nb.py")
    assert "@distributed(timeout=None)\ndef train():" in out and "train.distributed()\n" in out
    assert binding in out  # the variable stays: it may be read elsewhere
    assert not person_items(report)


def test_a_local_count_of_a_function_is_followed_in_that_function() -> None:
    source = (
        f"import torch\n{IMPORT}\ndef train():\n    return 1\n\n\ndef main():\n"
        "    gpus = torch.cuda.device_count()\n    TorchDistributor(gpus, True, True).run(train)\n"
    )
    out, report = migrate_text(source)
    assert "@distributed(timeout=None)\ndef train():" in out and "    train.distributed()\n" in out
    assert not person_items(report)


@pytest.mark.parametrize(
    "binding, extra",
    [
        ("n = torch.cuda.device_count()\nn = n // 2\n", ""),
        ("n = torch.cuda.device_count() // 2\n", ""),
        ("n = torch.cuda.device_count()\n", "%time n = 1\n"),
        ("n = 4\n", "n = 2\n"),
    ],
    ids=["rebound", "expression", "magic", "two literals"],
)
def test_any_other_count_name_is_blocked_as_before(binding: str, extra: str) -> None:
    source = notebook(
        f"import torch\n{IMPORT}{binding}",
        extra + "def train():\n    return 1",
        "TorchDistributor(num_processes=n).run(train)",
    )
    report = check_noop(source, path="nb.ipynb")
    assert person_items(report)[0] == (
        "AM208 blocking num_processes=n, and n is not bound to an integer literal or to torch.cuda.device_count() "
        "(nor to the same one wherever it is bound), so air-migrate cannot carry it over to "
        "@distributed(num_accelerators=...): write the number, or migrate by hand"
    )


@pytest.mark.parametrize("binding", ["N = 4\n", "N: int = 4\n", "N = 4\nN = 4\n"], ids=["once", "annotated", "same"])
def test_a_count_name_bound_to_an_integer_literal_is_carried_over(binding: str) -> None:
    source = databricks(
        f"import torch\n{IMPORT}{binding}",
        "def train():\n    return 1\n",
        "TorchDistributor(num_processes=N).run(train)\n",
    )
    out, report = migrate_text(source, "nb.py")
    assert "@distributed(num_accelerators=4, timeout=None)\ndef train():" in out and binding.split("\n")[0] in out
    assert not person_items(report)


def test_a_device_count_name_for_cpu_ranks_is_blocked_as_the_inline_form_is() -> None:
    source = (
        f"import torch\n{IMPORT}n = torch.cuda.device_count()\n\ndef train():\n    return 1\n\n"
        "TorchDistributor(n, use_gpu=False).run(train)\n"
    )
    assert person_items(migrate_text(source)[1]) == [
        "AM208 blocking num_processes=torch.cuda.device_count() with use_gpu=False counts GPUs for CPU ranks: write "
        "the number of CPU ranks"
    ]


# --- no comment is lost ---------------------------------------------------------------------------------


def _comments(text: str) -> List[str]:
    return [
        token.string for token in tokenize.generate_tokens(io.StringIO(text).readline) if token.type == tokenize.COMMENT
    ]


def test_the_comments_of_a_removed_multi_line_distributor_go_above_the_new_decorator() -> None:
    source = databricks(
        IMPORT + "\n# Trains on one rank.\ndef train(epochs):\n    return epochs\n",
        "distributor = TorchDistributor(\n    num_processes=8,  # one per GPU\n    # on this node only\n"
        "    local_mode=True,\n)  # built once\nloss = distributor.run(train, 3)\n",
    )
    out, report = migrate_text(source, "nb.py")
    assert out == databricks(
        "from databricks.air import distributed\n\n# Trains on one rank.\n# one per GPU\n# on this node only\n"
        "# built once\n@distributed(num_accelerators=8, timeout=None)\ndef train(epochs):\n    return epochs\n",
        "loss = train.distributed(3)[0]\n",
    )
    decorator = next(line for line in report if " AM201 change @distributed" in line)
    assert decorator.endswith(
        "added to train, which TorchDistributor ran, below the comments of the TorchDistributor(...) it replaces"
    )
    assert check_noop(out, path="nb.py") == []


def test_the_comments_of_a_chained_constructor_go_above_the_decorator_of_a_function_in_a_block() -> None:
    source = (
        f"{IMPORT}\n\nclass Jobs:\n    pass\n\n\nif True:\n    def train():\n        return 1\n\n"
        "    TorchDistributor(\n        num_processes=2,  # two ranks\n    ).run(train)  # go\n"
    )
    out, _ = migrate_text(source)
    assert "    # two ranks\n    @distributed(num_accelerators=2, timeout=None)\n    def train():" in out
    assert "    train.distributed()  # go\n" in out


@pytest.mark.parametrize(
    "imports",
    [
        "from pyspark.ml.torch.distributor import (  # Spark's\n    TorchDistributor,  # the class\n)\n",
        "import os; from pyspark.ml.torch.distributor import TorchDistributor  # the class\n",
        "from pyspark.ml.torch.distributor import (\n    TorchDistributor,  # the class\n    get_gpus_owned,  # kept\n)\n",
    ],
    ids=["replaced", "in a line that stays", "a name dropped"],
)
def test_every_comment_of_a_file_is_still_there_after_the_rewrite(imports: str) -> None:
    source = (
        f"{imports}\n# Trains.\ndef train():\n    return 1\n\n\n# Run it.\nd = TorchDistributor(\n"
        "    2,  # ranks\n)  # d\nd.run(  # now\n    train,  # the function\n)\nget_gpus_owned = os = 1\n"
    )
    out, report = migrate_text(source)
    assert "TorchDistributor" not in out
    assert sorted(_comments(out)) == sorted(_comments(source))


def test_a_function_rebinding_its_own_distributor_is_followed_unless_a_nested_function_runs_it() -> None:
    body = "def main():\n    d = TorchDistributor(2)\n    d.run(a)\n    d = TorchDistributor(4)\n    d.run(b)\n"
    out, report = migrate_text(f"{IMPORT}\n{FUNCTIONS}\n\n{body}")
    assert "    a.distributed()\n    b.distributed()\n" in out and "TorchDistributor" not in out
    assert "@distributed(num_accelerators=2, timeout=None)\ndef a():" in out
    assert not person_items(report)
    nested = f"{IMPORT}\n{FUNCTIONS}\n\n{body}    def later():\n        d.run(a)\n"
    out, report = migrate_text(nested)
    assert out == nested
    assert all(item.startswith("AM212 blocking d is bound more than once") for item in person_items(report))


def test_a_binding_in_a_block_used_further_on_is_not_told_apart_from_another_blocks() -> None:
    # Only the statement right after a binding is taken to read it; a use further on is followed only when every
    # binding is a plain statement of its block, which these are not.
    source = databricks(
        IMPORT + "\n" + FUNCTIONS,
        'if __name__ == "__main__":\n    d = TorchDistributor(2)\n    print("go")\n    d.run(a)\n',
        "try:\n    d = TorchDistributor(4)\n    d.run(b)\nexcept RuntimeError:\n    pass\n",
    )
    report = check_noop(source, path="nb.py")
    assert all(item.startswith("AM212 blocking d is bound more than once") for item in person_items(report))


def test_a_count_rebound_between_its_binding_and_the_constructor_is_not_followed() -> None:
    source = databricks(
        f"import torch\n{IMPORT}" + FUNCTIONS,
        "n = torch.cuda.device_count()\nTorchDistributor(num_processes=n).run(a)\n",
        "n = torch.cuda.device_count()\nn = n // 2\nTorchDistributor(num_processes=n).run(b)\n",
    )
    report = check_noop(source, path="nb.py")
    assert [item.split(" ", 2)[:2] for item in person_items(report)] == [["AM208", "blocking"]]
