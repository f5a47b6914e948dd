"""AM201 and the codes it reports: what the golden cases do not show, one behaviour per test, exact output and report.

The golden cases (``test_am2_golden.py``) cover each shape and each reported case in three file forms; here are the
finer points: how names resolve, import forms and placement, what happens to comments and blocks when statements
go, the settings each constructor form gives, and how the rule works with the others and with the options.
"""

from __future__ import annotations

import json
from typing import List

import pytest
from rule_helpers import check_noop, check_transformed, migrate_result, migrate_text

from air_migrate.rules import REGISTRY

IMPORT = "from pyspark.ml.torch.distributor import TorchDistributor\n"


def codes(lines: List[str]) -> List[str]:
    return [line.split(": ", 1)[1].split(" ", 2)[0] + " " + line.split(": ", 1)[1].split(" ", 2)[1] for line in lines]


# --- recognising TorchDistributor -------------------------------------------------------------------------------------


def test_only_pyspark_torch_distributor_is_recognised_whatever_else_shares_its_name() -> None:
    source = (
        "from my_launchers import TorchDistributor\n\ndef train():\n    return 1\n\nTorchDistributor(2).run(train)\n"
    )
    assert check_noop(source) == []


def test_a_dotted_import_of_the_module_is_followed_and_kept_while_pyspark_is_used_otherwise() -> None:
    source = (
        "import pyspark.ml.torch.distributor\n"
        "import pyspark.sql.functions\n\n"
        "def train():\n    return 1\n\n"
        "pyspark.ml.torch.distributor.TorchDistributor(num_processes=2).run(train)\n"
        "column = pyspark.sql.functions.col('x')\n"
    )
    expected = (
        "import pyspark.ml.torch.distributor\n"
        "from databricks.air import distributed\n"
        "import pyspark.sql.functions\n\n"
        "@distributed(num_accelerators=2, timeout=None)\n"
        "def train():\n    return 1\n\n"
        "train.distributed()\n"
        "column = pyspark.sql.functions.col('x')\n"
    )
    report = check_transformed(source, expected)
    assert report[0] == "job.py:1:1: AM204 change from databricks.air import distributed added after this import"


def test_a_guarded_import_with_a_fallback_is_not_trusted() -> None:
    source = (
        "try:\n    from pyspark.ml.torch.distributor import TorchDistributor\nexcept ImportError:\n"
        "    TorchDistributor = None\n\n"
        "def train():\n    return 1\n\n"
        "TorchDistributor(2).run(train)\n"
    )
    report = check_noop(source)
    assert report == [
        "job.py:9:1: AM212 blocking TorchDistributor is bound to more than one thing here, so air-migrate cannot "
        "tell whether it is pyspark's TorchDistributor: migrate it by hand"
    ]


def test_a_torch_distributor_imported_nowhere_in_the_file_is_reported_not_guessed() -> None:
    source = (
        "# Databricks notebook source\n# MAGIC %run ./setup\n\n# COMMAND ----------\n\nTorchDistributor(2).run(train)\n"
    )
    report = check_noop(source)
    assert report == [
        "job.py:cell 1:2:9: AM111 manual %run ./setup runs another notebook: names it defines are not resolved here, "
        "so uses of them are not migrated; run air-migrate on it too and check this notebook by hand",
        "job.py:cell 2:6:1: AM212 manual TorchDistributor is not imported in this file (a %run notebook or a cell "
        "air-migrate cannot read?), so it is left as it is: import it from pyspark.ml.torch.distributor here and run "
        "air-migrate again",
    ]


def test_a_file_that_only_mentions_torch_distributor_in_comments_and_strings_is_left_alone() -> None:
    source = '"""Once trained with TorchDistributor."""\n# TorchDistributor(2).run(train)\nx = 1\n'
    assert check_noop(source) == []


def test_the_rules_can_be_left_out() -> None:
    source = IMPORT + "\ndef train():\n    return 1\n\nTorchDistributor(2).run(train)\n"
    rules = [rule for code, rule in sorted(REGISTRY.items()) if not code.startswith("AM2")]
    assert check_noop(source, rules=rules) == []


# --- constructor settings ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, decorator",
    [
        ("", "distributed(num_accelerators=1, timeout=None)"),
        ("3", "distributed(num_accelerators=3, timeout=None)"),
        ("3, True", "distributed(num_accelerators=3, timeout=None)"),
        ("2, True, False", 'distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)'),
        ("use_gpu=False", 'distributed(num_accelerators=1, accelerator_type="CPU", timeout=None)'),
        ("local_mode=True, num_processes=16", "distributed(num_accelerators=16, timeout=None)"),
        ("num_processes=torch.cuda.device_count(), use_gpu=True", "distributed(timeout=None)"),
        ("cuda.device_count()", "distributed(timeout=None)"),
    ],
)
def test_each_constructor_form_gives_its_decorator(arguments: str, decorator: str) -> None:
    source = (
        f"import torch\nfrom torch import cuda\n{IMPORT}\ndef train():\n    return 1\n\n"
        f"TorchDistributor({arguments}).run(train)\n"
    )
    out, _ = migrate_text(source)
    assert f"@{decorator}\ndef train():" in out and "train.distributed()" in out and "pyspark" not in out


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            "num_processes=0",
            "num_processes=0 is not a number of ranks (TorchDistributor raises ValueError for it): write 1 or more",
        ),
        (
            "n",
            "num_processes=n, and n is not bound to an integer literal or to torch.cuda.device_count() (nor to the "
            "same one wherever it is bound), so air-migrate cannot carry it over to @distributed(num_accelerators="
            "...): write the number, or migrate by hand",
        ),
        (
            "torch.cuda.device_count(), use_gpu=False",
            "num_processes=torch.cuda.device_count() with use_gpu=False "
            "counts GPUs for CPU ranks: write the number of CPU ranks",
        ),
        (
            "2, use_gpu=GPU",
            "use_gpu= is not True or False as written, so air-migrate cannot tell what it runs on: write True or False",
        ),
        (
            "2, True, True, 'conf'",
            "TorchDistributor takes three arguments by position (num_processes, local_mode, "
            "use_gpu): this one is not carried over",
        ),
        (
            "2, _ssl_conf='x'",
            "_ssl_conf= has no counterpart on @distributed: remove it, or migrate this distributor by hand",
        ),
        ("**settings", "**-arguments hide the distributor's settings, so they cannot be carried over: write them out"),
    ],
)
def test_settings_that_cannot_be_carried_over_block_the_file(arguments: str, message: str) -> None:
    source = f"import torch\n{IMPORT}\ndef train():\n    return 1\n\nTorchDistributor({arguments}).run(train)\n"
    report = check_noop(source)
    assert [line.split(": ", 1)[1] for line in report] == [f"AM208 blocking {message}"]


# --- runs and their targets -------------------------------------------------------------------------------------------


def test_a_used_value_keeps_rank_zeros_meaning_in_any_expression() -> None:
    source = (
        IMPORT + "\ndef train():\n    return 1\n\n"
        "def main():\n    return TorchDistributor(2).run(train)\n\n"
        "print((TorchDistributor(2).run(train)))\n"
    )
    out, report = migrate_text(source)
    assert "    return train.distributed()[0]\n" in out
    assert "print((train.distributed()[0]))\n" in out
    assert codes(report) == ["AM204 change", "AM201 change", "AM218 review", "AM202 review", "AM202 review"]


def test_a_local_distributor_is_followed_in_its_function() -> None:
    source = (
        IMPORT + "\ndef train():\n    return 1\n\n"
        "def main():\n    d = TorchDistributor(2)\n    # the run\n    d.run(train)\n"
    )
    expected = (
        "from databricks.air import distributed\n\n@distributed(num_accelerators=2, timeout=None)\ndef train():\n    return 1\n\n"
        "def main():\n    # the run\n    train.distributed()\n"
    )
    report = check_transformed(source, expected)
    assert codes(report) == ["AM204 change", "AM201 change", "AM218 review", "AM205 change", "AM201 change"]


@pytest.mark.parametrize(
    "definition, message",
    [
        ("async def train():\n    return 1\n", "train is a coroutine function (async def): ranks run plain functions"),
        ("class train:\n    pass\n", "train is a class, not a function: run a module-level def that uses it"),
        ("train = make_train()\n", "train is not bound by a def here: run a module-level def"),
        (
            "def train():\n    return 1\n\ndef train():\n    return 2\n",
            "train is bound more than once in this file, so air-migrate cannot tell which function runs: keep one def",
        ),
        (
            "from databricks.air import distributed\n\n@distributed(num_accelerators=2, timeout=None)\ndef train():\n    return 1\n",
            "train is already decorated with distributed: call train.distributed(...) instead",
        ),
        (
            "",
            "train is not defined in this file (a %run notebook, or a cell air-migrate cannot read?): the "
            "decorator goes on its def, so migrate where it is defined",
        ),
    ],
)
def test_targets_that_are_not_one_plain_module_level_def_are_reported(definition: str, message: str) -> None:
    source = f"{IMPORT}\n{definition}\nTorchDistributor(2).run(train)\n"
    report = check_noop(source)
    assert [line.split(": ", 1)[1] for line in report] == [f"AM209 blocking {message}"]


def test_a_function_passed_by_keyword_is_reported() -> None:
    source = f"{IMPORT}\ndef train():\n    return 1\n\nTorchDistributor(2).run(train_object=train)\n"
    report = check_noop(source)
    assert report[0].endswith(
        "AM209 blocking the function is passed by keyword or unpacked: pass it first, by position"
    )


def test_a_distributor_bound_twice_runs_its_last_binding_and_one_bound_under_an_if_is_not_followed() -> None:
    source = f"{IMPORT}\ndef train():\n    return 1\n\nd = TorchDistributor(2)\nd = TorchDistributor(4)\nd.run(train)\n"
    expected = (
        f"{IMPORT}from databricks.air import distributed\n\n@distributed(num_accelerators=4, timeout=None)\n"
        "def train():\n    return 1\n\nd = TorchDistributor(2)\ntrain.distributed()\n"
    )
    report = check_transformed(source, expected)
    assert (
        "job.py:6:1: AM212 manual d = TorchDistributor(...) is never run in this file, so it is left as it is "
        "(and so is its import): remove it if nothing else uses it" in report
    )
    conditional = source.replace("d = TorchDistributor(4)\n", "if big:\n    d = TorchDistributor(4)\n")
    report = check_noop(conditional)
    assert report == [
        "job.py:9:1: AM212 blocking d is bound more than once, or not only to a TorchDistributor, so "
        "air-migrate cannot tell which distributor runs here: migrate it by hand"
    ]


def test_a_distributor_never_run_is_kept_with_its_import_and_said_so() -> None:
    source = f"{IMPORT}\ndef train():\n    return 1\n\nspare = TorchDistributor(8)\nTorchDistributor(2).run(train)\n"
    expected = (
        f"{IMPORT}from databricks.air import distributed\n\n@distributed(num_accelerators=2, timeout=None)\ndef train():\n"
        "    return 1\n\nspare = TorchDistributor(8)\ntrain.distributed()\n"
    )
    report = check_transformed(source, expected)
    assert (
        "job.py:6:1: AM212 manual spare = TorchDistributor(...) is never run in this file, so it is left as it is "
        "(and so is its import): remove it if nothing else uses it" in report
    )


def _notebook(*cells: str) -> str:
    document = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": text}
            for text in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1) + "\n"


def test_names_in_magics_count_as_uses_and_torch_distributor_in_a_magic_blocks() -> None:
    source = _notebook(IMPORT.strip(), "def train():\n    return 1", "%time TorchDistributor(2).run(train)")
    report = check_noop(source, path="nb.ipynb")
    assert report == [
        "nb.ipynb:cell 3:1:1: AM215 blocking this magic line uses TorchDistributor, which air-migrate "
        "cannot rewrite inside a magic: write it as plain Python (without the magic), then run "
        "air-migrate again"
    ]
    source = _notebook(IMPORT.strip(), "def train():\n    return 1", "%time train()", "TorchDistributor(2).run(train)")
    report = check_noop(source, path="nb.ipynb")
    assert report == [
        "nb.ipynb:cell 2:1:5: AM211 blocking train also appears in a cell or magic air-migrate cannot "
        "read, where the decorator could break it: check it, then migrate by hand"
    ]


def test_a_cell_in_another_language_that_mentions_torch_distributor_is_reported_and_blocks_nothing() -> None:
    source = _notebook(
        "%%bash\ngrep -r TorchDistributor .",
        IMPORT.strip(),
        "def train():\n    return 1",
        "TorchDistributor(2).run(train)",
    )
    out, report = migrate_text(source, "nb.ipynb")
    assert out != source and "pyspark" not in out
    assert report[0] == (
        "nb.ipynb:cell 1:1:1: AM215 manual this %%bash cell mentions TorchDistributor; air-migrate "
        "does not read other languages: check it by hand"
    )


# --- what goes, and where the import comes ----------------------------------------------------------------------------


def test_statements_that_go_leave_their_comments_and_a_valid_block() -> None:
    source = (
        "import os; from pyspark.ml.torch.distributor import TorchDistributor; import sys\n\n"
        "def train():\n    return 1\n\n"
        "if os.environ.get('GPU'):\n    # one per GPU\n    d = TorchDistributor(2)\n"
        "else:\n    d2 = TorchDistributor(1); print('one')\n"
        "d.run(train)\nd2.run(train)\n"
    )
    report = check_noop(source)  # two settings for one function
    source = source.replace("d2.run(train)\n", "")
    expected = (  # d2 is never run, so the old import stays, and the new one joins it
        "import os; from pyspark.ml.torch.distributor import TorchDistributor; import sys\n"
        "from databricks.air import distributed\n\n"
        "@distributed(num_accelerators=2, timeout=None)\ndef train():\n    return 1\n\n"
        "if os.environ.get('GPU'):\n    # one per GPU\n    pass\n"
        "else:\n    d2 = TorchDistributor(2); print('one')\n"
        "train.distributed()\n"
    )
    report = check_transformed(source.replace("TorchDistributor(1)", "TorchDistributor(2)"), expected)
    assert (
        "job.py:10:5: AM212 manual d2 = TorchDistributor(...) is never run in this file, so it is left as it is "
        "(and so is its import): remove it if nothing else uses it" in report
    )


def test_the_import_replaces_the_old_one_in_place_keeping_its_comment_and_line_endings() -> None:
    source = IMPORT.rstrip("\n") + "  # launcher\n\ndef train():\n    return 1\n\nTorchDistributor().run(train)\n"
    expected = (
        "from databricks.air import distributed  # launcher\r\n\r\n@distributed(num_accelerators=1, timeout=None)\r\n"
        "def train():\r\n    return 1\r\n\r\ntrain.distributed()\r\n"
    )
    check_transformed(source.replace("\n", "\r\n"), expected)


def test_an_existing_decorator_import_is_reused_under_its_own_name() -> None:
    source = (
        "from databricks.air import distributed as launch\n"
        + IMPORT
        + "\ndef train():\n    return 1\n\nTorchDistributor(2).run(train)\n"
    )
    expected = (
        "from databricks.air import distributed as launch\n\n@launch(num_accelerators=2, timeout=None)\ndef train():\n"
        "    return 1\n\ntrain.distributed()\n"
    )
    report = check_transformed(source, expected)
    assert codes(report) == ["AM204 change", "AM201 change", "AM218 review", "AM201 change"]


def test_a_serverless_gpu_import_is_migrated_and_reused_in_the_same_run() -> None:
    source = (
        "from serverless_gpu import distributed\n"
        + IMPORT
        + "\ndef train():\n    return 1\n\nTorchDistributor(2).run(train)\n"
    )
    expected = (
        "from databricks.air import distributed\n\n@distributed(num_accelerators=2, timeout=None)\ndef train():\n"
        "    return 1\n\ntrain.distributed()\n"
    )
    check_transformed(source, expected)


def test_the_import_is_bound_again_after_each_restart_for_each_function() -> None:
    source = (
        "# Databricks notebook source\n" + IMPORT + "\ndef train():\n    return 1\n\n"
        "# COMMAND ----------\n\n# MAGIC %pip install x\n\n# COMMAND ----------\n\n"
        "def evaluate():\n    return 2\n\n"
        "# COMMAND ----------\n\n"
        "TorchDistributor(2).run(train)\nTorchDistributor(2).run(evaluate)\n"
    )
    expected = (
        "# Databricks notebook source\nfrom databricks.air import distributed\n\n"
        "@distributed(num_accelerators=2, timeout=None)\ndef train():\n    return 1\n\n"
        "# COMMAND ----------\n\n# MAGIC %pip install x\n\n# COMMAND ----------\n\n"
        "from databricks.air import distributed\n\n"
        "@distributed(num_accelerators=2, timeout=None)\ndef evaluate():\n    return 2\n\n"
        "# COMMAND ----------\n\n"
        "train.distributed()\nevaluate.distributed()\n"
    )
    check_transformed(source, expected)


# --- with the rest of the tool ----------------------------------------------------------------------------------------


def test_todo_comments_mark_what_blocks_and_nothing_else_changes() -> None:
    source = f"{IMPORT}\ndef train():\n    return 1\n\nTorchDistributor(2, False).run(train)\n"
    expected = source.replace(
        "TorchDistributor(2, False)",
        "# TODO(air-migrate AM207): local_mode=False runs the ranks on the Spark cluster's workers, several nodes: "
        "@distributed runs on this node only; for several nodes use @distributed(remote=True, num_accelerators=N, "
        "accelerator_type=...) on a Ray cluster (see the scaling guide), or keep TorchDistributor\n"
        "TorchDistributor(2, False)",
    )
    check_transformed(source, expected, todo_comments=True)
    check_noop(expected, todo_comments=True)  # never twice


def test_insertions_are_reported_with_what_they_add() -> None:
    source = f"def train():\n    return 1\n\n{IMPORT}TorchDistributor(use_gpu=False).run(train)\n"
    result = migrate_result(source)
    found = {(r.code, r.line, r.column, r.before, r.after, r.severity) for r in result.records}
    assert found == {
        ("AM201", 1, 1, "", '@distributed(num_accelerators=1, accelerator_type="CPU", timeout=None)', "change"),
        ("AM204", 1, 1, "", "from databricks.air import distributed", "change"),
        ("AM204", 4, 1, IMPORT.strip(), "", "change"),
        ("AM201", 5, 1, "TorchDistributor(use_gpu=False).run(train)", "train.distributed()", "change"),
        ("AM203", 5, 18, "use_gpu=False", 'accelerator_type="CPU"', "review"),
        ("AM218", 1, 1, None, None, "review"),
    }
    assert (
        result.migrated
        == (
            "from databricks.air import distributed\n\n\n"
            '@distributed(num_accelerators=1, accelerator_type="CPU", timeout=None)\ndef train():\n    return 1\n\n'
            "train.distributed()\n"
        ).encode()
    )


def test_an_aliased_decorator_import_is_bound_again_after_a_restart_from_databricks_air() -> None:
    source = (
        "# Databricks notebook source\nimport serverless_gpu as sg\n" + IMPORT + "\ndef train():\n    return 1\n\n"
        "# COMMAND ----------\n\n# MAGIC %pip install x\n\n# COMMAND ----------\n\n"
        "def evaluate():\n    return 2\n\nTorchDistributor(2).run(train)\nTorchDistributor(2).run(evaluate)\n"
    )
    expected = (
        "# Databricks notebook source\nimport databricks.air as sg\n"
        "\n@sg.distributed(num_accelerators=2, timeout=None)\ndef train():\n    return 1\n\n"
        "# COMMAND ----------\n\n# MAGIC %pip install x\n\n# COMMAND ----------\n\n"
        "import databricks.air as sg\n\n"
        "@sg.distributed(num_accelerators=2, timeout=None)\ndef evaluate():\n    return 2\n\n"
        "train.distributed()\nevaluate.distributed()\n"
    )
    check_transformed(source, expected)
