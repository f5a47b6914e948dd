"""The keyword and type rules follow ``distributed`` and ``ray_launch`` however they were imported, and GPU
type strings as the runtime reads them: the package, its submodules (``serverless_gpu.launcher``, ``serverless_gpu.ray``, the old
``serverless_gpu.api``), aliases and ``import ... as``; and ``--check`` never passes a file left half-migrated."""

from __future__ import annotations

from pathlib import Path

import pytest
from rule_helpers import migrate_text as migrate

from air_migrate.cli import main
from databricks.air.compute import AcceleratorType, GPUType
from databricks.air._validation import parse_type


# Each import form of a launcher, and how the decorator reads through it: (import, decorator, import after).
FORMS = [
    ("from serverless_gpu.ray import ray_launch", "ray_launch", "from databricks.air.ray import ray_launch"),
    ("from serverless_gpu.ray import ray_launch as rl", "rl", "from databricks.air.ray import ray_launch as rl"),
    ("import serverless_gpu.ray as sray", "sray.ray_launch", "import databricks.air.ray as sray"),
    ("import serverless_gpu.ray", "serverless_gpu.ray.ray_launch", "import databricks.air.ray"),
    ("from serverless_gpu import ray", "ray.ray_launch", "from databricks.air import ray"),
    (
        "from serverless_gpu.launcher import distributed",
        "distributed",
        "from databricks.air.launcher import distributed",
    ),
    (
        "from serverless_gpu.launcher import distributed as launch",
        "launch",
        "from databricks.air.launcher import distributed as launch",
    ),
    (
        "import serverless_gpu.launcher as launcher",
        "launcher.distributed",
        "import databricks.air.launcher as launcher",
    ),
    ("import serverless_gpu.launcher", "serverless_gpu.launcher.distributed", "import databricks.air.launcher"),
    ("from serverless_gpu import launcher", "launcher.distributed", "from databricks.air import launcher"),
    ("from serverless_gpu.api import distributed", "distributed", "from databricks.air import distributed"),
    ("import serverless_gpu.api as sgc", "sgc.distributed", "import databricks.air as sgc"),
    ("from serverless_gpu import distributed as d", "d", "from databricks.air import distributed as d"),
    ("import serverless_gpu as sg", "sg.distributed", "import databricks.air as sg"),
    ("import serverless_gpu", "serverless_gpu.distributed", "import databricks.air"),
    (
        "from databricks.air.launcher import distributed",
        "distributed",
        "from databricks.air.launcher import distributed",
    ),
]


@pytest.mark.parametrize("import_line, decorator, after", FORMS, ids=[form[1] + "|" + form[0] for form in FORMS])
def test_old_keywords_are_rewritten_whatever_the_import_path(import_line: str, decorator: str, after: str) -> None:
    source = f'{import_line}\n\n\n@{decorator}(gpus=4, gpu_type="A10", remote=True)\ndef job():\n    return 1\n'
    out, report = migrate(source)
    new_decorator = (
        decorator.replace("serverless_gpu.", "databricks.air.")
        if import_line.startswith("import ") and " as " not in import_line
        else decorator
    )
    assert out == (
        f'{after}\n\n\n@{new_decorator}(num_accelerators=4, accelerator_type="GPU_1xA10", remote=True)\n'
        "def job():\n    return 1\n"
    )
    assert not [line for line in report if " manual " in line or " blocking " in line]
    assert migrate(out) == (out, [])


def test_the_launcher_path_of_databricks_fine_tuning_examples_is_migrated_without_a_false_report() -> None:
    source = (
        "from serverless_gpu.launcher import distributed\n"
        "from serverless_gpu.compute import GPUType\n\n\n"
        "@distributed(gpus=8, gpu_type=GPUType.H100)\n"
        "def run_train(cfg):\n    return cfg\n"
    )
    out, report = migrate(source)
    assert out == (
        "from databricks.air.launcher import distributed\n"
        "from databricks.air.compute import AcceleratorType\n\n\n"
        "@distributed(num_accelerators=8, accelerator_type=AcceleratorType.GPU_8xH100)\n"
        "def run_train(cfg):\n    return cfg\n"
    )
    assert not [line for line in report if "outside a distributed call" in line]
    assert [line.split(": ", 1)[1] for line in report if " AM108 " in line] == [
        "AM108 review GPUType -> AcceleratorType in the import: no use of GPUType is left (check that no other "
        "module imports it from here)",
        "AM108 change GPUType.H100 -> AcceleratorType.GPU_8xH100",
    ]


def test_a_plain_import_of_the_old_api_module_is_reported_and_its_uses_left_as_written() -> None:
    source = "import serverless_gpu.api\n\nserverless_gpu.api.distributed(gpus=2)(print)\n"
    out, report = migrate(source)
    assert out == "import serverless_gpu.api\n\nserverless_gpu.api.distributed(num_accelerators=2)(print)\n"
    assert report[0] == (
        "job.py:1:1: AM101 manual serverless_gpu.api is databricks.air itself under an old name, which databricks.air "
        "does not have, so this import and its uses are left as they are: write `import databricks.air as api`, or "
        "import the names from databricks.air"
    )


def test_a_submodule_with_no_counterpart_is_reported_not_rewritten_to_a_path_that_does_not_exist() -> None:
    source = "from serverless_gpu.telemetry import emit\nimport serverless_gpu.sgc_run\n"
    out, report = migrate(source)
    assert out == source
    modules = "compute, data, exceptions, launcher, ray, runtime, utils"
    assert report == [
        f"job.py:{line}:1: AM101 manual serverless_gpu.{name} has no counterpart in databricks.air (its modules are "
        f"{modules}), so it is left as it is: import the names it gives from databricks.air or one of those modules"
        for line, name in [(1, "telemetry"), (2, "sgc_run")]
    ]


def test_another_callable_of_the_package_given_an_old_keyword_is_reported_every_time() -> None:
    source = "from serverless_gpu.launcher import DistributedFunction\n\nDistributedFunction(print, gpus=2)\n"
    out, report = migrate(source)
    assert out == source.replace("serverless_gpu", "databricks.air")
    assert report[1] == (
        "job.py:3:28: AM102 manual gpus= is given to serverless_gpu.launcher.DistributedFunction, which is not "
        "distributed or ray_launch, so it is left as it is: check what that function takes (num_accelerators=, "
        "accelerator_type=?)"
    )
    assert migrate(out)[1] == [report[1].replace("serverless_gpu", "databricks.air")]


# --- --check tells a half-migrated file ---------------------------------------------------------------------------


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> int:
    code = main(["--check", "--no-progress", str(path)])
    capsys.readouterr()
    return code


def test_check_fails_until_the_ray_launch_keywords_are_rewritten_and_passes_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "embed.py"
    path.write_text(
        'from serverless_gpu.ray import ray_launch\n\n@ray_launch(gpus=4, gpu_type="A10", remote=True)\n'
        "def embed():\n    return 1\n"
    )
    assert _check(path, capsys) == 1
    # What the tool used to write: the import moved, the keywords left. --check must not pass it.
    path.write_text(
        'from databricks.air.ray import ray_launch\n\n@ray_launch(gpus=4, gpu_type="A10", remote=True)\n'
        "def embed():\n    return 1\n"
    )
    assert _check(path, capsys) == 1
    assert main(["--no-progress", str(path)]) == 0
    capsys.readouterr()
    assert "gpus=" not in path.read_text() and "GPU_1xA10" in path.read_text()
    assert _check(path, capsys) == 0


# --- GPU type strings as the runtime reads them ----------------------------------------------------------


SPELLINGS = ["h100", "H100", " H100 ", "h100_80gb", "a10", "A10G", "a10g", "b300", "B300"]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("count", [1, 8, 16])
def test_every_spelling_the_runtime_accepts_maps_to_the_type_the_runtime_suggests(spelling: str, count: int) -> None:
    model, legacy = parse_type(spelling)
    assert legacy and isinstance(model, GPUType)
    expected = AcceleratorType.from_gpu_type(model, count).value
    source = (
        f"from serverless_gpu import distributed\n\n@distributed(gpus={count}, gpu_type={spelling!r})\ndef f(): ...\n"
    )
    out, report = migrate(source)
    assert out == (
        f"from databricks.air import distributed\n\n"
        f"@distributed(num_accelerators={count}, accelerator_type={expected!r})\ndef f(): ...\n"
    )
    assert f"AM103 change {spelling!r} -> {expected!r}" in report[-1]


@pytest.mark.parametrize("spelling", ["gpu_8xh100", "GPU_1XA10", "cpu"])
def test_an_accelerator_type_in_another_case_is_already_new_and_left_alone(spelling: str) -> None:
    source = (
        f"from databricks.air import distributed\n\n@distributed(num_accelerators=8, accelerator_type={spelling!r})\n"
        "def f(): ...\n"
    )
    assert parse_type(spelling) == (AcceleratorType(spelling), False)
    assert migrate(source) == (source, [])


def test_a_lowercase_h100_still_needs_a_count_that_has_a_shape() -> None:
    out, report = migrate(
        "from serverless_gpu import distributed\n\n@distributed(gpus=4, gpu_type='h100')\ndef f(): ...\n"
    )
    assert report[-1] == "job.py:3:31: AM105 blocking 'h100' with 4 GPUs has no accelerator type: write one by hand"
