"""AM101: serverless_gpu imports to databricks.air, before/after pairs with their exact reports."""

from __future__ import annotations

import libcst
import pytest
from rule_helpers import apply, check_noop, check_transformed, person_items

from air_migrate.rules import REGISTRY

AM101 = ("AM101",)


CHANGES = [
    (
        "from serverless_gpu import distributed  # keep me\n",
        "from databricks.air import distributed  # keep me\n",
    ),
    (
        "from serverless_gpu import distributed as dist, runtime\nimport torch.distributed as tdist\n",
        "from databricks.air import distributed as dist, runtime\nimport torch.distributed as tdist\n",
    ),
    ("import serverless_gpu as sg\nsg.distributed()\n", "import databricks.air as sg\nsg.distributed()\n"),
    (
        "import serverless_gpu\nserverless_gpu.distributed(gpus=2)\n",
        "import databricks.air\ndatabricks.air.distributed(gpus=2)\n",
    ),
    (
        "import serverless_gpu.data\nx = serverless_gpu.data.DataLoader\n",
        "import databricks.air.data\nx = databricks.air.data.DataLoader\n",
    ),
    ("from serverless_gpu.compute import GPUType\n", "from databricks.air.compute import GPUType\n"),
    (
        "from serverless_gpu import (\n    distributed,\n    runtime as rt,  # rank helpers\n)\n",
        "from databricks.air import (\n    distributed,\n    runtime as rt,  # rank helpers\n)\n",
    ),
    (
        "import os, serverless_gpu\r\nprint(serverless_gpu.x)\r\n",
        "import os, databricks.air\r\nprint(databricks.air.x)\r\n",
    ),
    ("def f():\n\tfrom serverless_gpu import runtime\n", "def f():\n\tfrom databricks.air import runtime\n"),
]


@pytest.mark.parametrize("before, after", CHANGES)
def test_import_forms_are_rewritten_in_place(before: str, after: str) -> None:
    report = check_transformed(before, after, AM101)
    assert report and not person_items(report)
    assert check_noop(after, AM101) == []  # a second run changes and reports nothing


def test_names_that_only_look_alike_are_never_touched() -> None:
    source = (
        "import torch.distributed as dist\n"
        "from serverless_gpu import distributed\n"
        "def train(serverless_gpu, distributed):\n"
        "    return serverless_gpu.x, distributed, torch.distributed.init_process_group\n"
        "serverless_gpu = 3\n"
    )
    check_transformed(source, source.replace("from serverless_gpu import", "from databricks.air import", 1), AM101)


def test_an_existing_databricks_air_import_is_not_duplicated() -> None:
    source = "from databricks.air import distributed\nfrom serverless_gpu import distributed\nx = 1\n"
    assert check_transformed(source, "from databricks.air import distributed\nx = 1\n", AM101) == [
        "job.py:2:1: AM101 change from serverless_gpu import ... removed: databricks.air already provides these names "
        "here"
    ]


def test_a_star_import_is_rewritten_and_flagged_for_review() -> None:
    module, findings = apply(REGISTRY["AM101"], libcst.parse_module("from serverless_gpu import *\n"))
    assert module.code == "from databricks.air import *\n"
    assert [(f.line, f.column, f.severity, f.message) for f in findings] == [
        (
            1,
            1,
            "review",
            "from serverless_gpu import * -> from databricks.air import *; list the names you use instead of *",
        )
    ]


def test_every_rewrite_is_reported_with_its_source_before_and_after() -> None:
    module, findings = apply(
        REGISTRY["AM101"], libcst.parse_module("import serverless_gpu\nserverless_gpu.distributed(gpus=2)\n")
    )
    assert [(f.line, f.column, f.end_line, f.end_column, f.before, f.after, f.severity) for f in findings] == [
        (1, 1, 1, 22, "import serverless_gpu", "import databricks.air", "change"),
        (2, 1, 2, 15, "serverless_gpu", "databricks.air", "change"),
    ]


@pytest.mark.parametrize(
    "source",
    [
        'if __name__ == "__main__":\n    from serverless_gpu import distributed\n',
        "if HAVE_GPU:\n    pass\nelse:\n    from serverless_gpu import distributed\n",
        "if sys.version_info < (3, 10):\n    pass\nelif GPUS:\n    import serverless_gpu\n    serverless_gpu.x\n",
    ],
    ids=["main", "else", "elif"],
)
def test_an_import_in_a_plain_if_or_else_branch_is_rewritten(source: str) -> None:
    # Only a try, or an if that picks between the two packages, guards an import: any other branch is plain code,
    # whose keywords are rewritten too, and databricks.air gives the very objects serverless_gpu does.
    report = check_transformed(source, source.replace("serverless_gpu", "databricks.air"), AM101)
    assert report and not person_items(report)  # nothing left for a person


@pytest.mark.parametrize(
    "source, finding",
    [
        (
            "try:\n    from serverless_gpu import distributed\nexcept ImportError:\n    pass\n",
            "job.py:2:5: AM101 manual a guarded import from serverless_gpu is left as it is: move it by hand",
        ),
        (  # an if that picks between the packages is a fallback, as a try is
            "if HAVE_AIR:\n    import databricks.air as air\nelse:\n    import serverless_gpu as air\n",
            "job.py:4:5: AM101 manual a guarded import of serverless_gpu is left as it is: move it by hand",
        ),
        (
            "if importlib.util.find_spec(NAME):\n    import serverless_gpu\n",
            "job.py:2:5: AM101 manual a guarded import of serverless_gpu is left as it is: move it by hand",
        ),
        (
            "import importlib\nm = importlib.import_module('serverless_gpu.runtime')\n",
            "job.py:2:5: AM101 manual a dynamic import of 'serverless_gpu.runtime' is left as it is: import "
            "databricks.air instead",
        ),
        (
            "import mock\np = mock.patch('serverless_gpu.launcher.distributed')\n",
            "job.py:2:16: AM101 manual a string names the module path 'serverless_gpu.launcher.distributed', left as "
            "it is: if code imports or patches by it (mock.patch, import_module), write databricks.air there",
        ),
        # Prose: a note (info), never an item for a person.
        (
            '"""Trains with serverless_gpu."""\n',
            "job.py:1:1: AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is",
        ),
        (
            'x = f"{n} GPUs of serverless_gpu"\n',
            "job.py:1:5: AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is",
        ),
    ],
)
def test_what_is_not_rewritten_is_reported(source: str, finding: str) -> None:
    assert check_noop(source, AM101) == [finding]
