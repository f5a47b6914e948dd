"""The deprecated ``serverless_gpu`` package: the same objects under old paths, old arguments, one warning."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import databricks.air
import databricks.air.compute
import databricks.air.exceptions
import databricks.air.runtime
import databricks.air.utils
from air_migrate.codes import select_rules
from air_migrate.engine import migrate_file

PUBLIC_IMPORTS = {
    "serverless_gpu": ["distributed", "ray_launch", "ray_init", "runtime"],
    "serverless_gpu.launcher": ["distributed"],
    "serverless_gpu.ray": ["ray_launch", "ray_init"],
    "serverless_gpu.compute": ["GPUType"],
    "serverless_gpu.runtime": ["get_local_rank", "get_global_rank", "get_world_size"],
    "serverless_gpu.data": ["UCVolumeWriter", "UCVolumeReader", "UCVolumeDataset", "DataLoader"],
    "serverless_gpu.api": ["distributed"],
}
"""Every ``serverless_gpu`` module path that public notebooks and scripts import, with the names they take from it.

Found with the code search of public repositories (Databricks' own examples, and notebooks that follow them), late
2026: ``from serverless_gpu import distributed`` and ``from serverless_gpu import runtime as rt`` (everywhere), ``from
serverless_gpu.launcher import distributed`` (Databricks' fine-tuning examples: Axolotl, OLMo, LoRA), ``from
serverless_gpu.ray import ray_launch``, ``from serverless_gpu.compute import GPUType``, ``serverless_gpu.runtime``,
``from serverless_gpu.data import UCVolumeWriter, UCVolumeReader, UCVolumeDataset, DataLoader``, ``from
serverless_gpu import ray_init``, and once, in one project, under ``try``/``except ImportError``: ``from
serverless_gpu.api import distributed``. (``databricks.serverless_gpu.data``, seen as a fallback, is another
package's path.)"""


@pytest.mark.parametrize("module", ["compute", "runtime", "exceptions", "utils"])
def test_every_shim_module_exposes_the_very_same_objects(module: str) -> None:
    new = importlib.import_module(f"databricks.air.{module}")
    old = importlib.import_module(f"serverless_gpu.{module}")
    assert new.__all__
    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name), name


def _same(old: object, new: object) -> bool:
    """The very same object; for a module, the very same public objects."""
    if isinstance(old, type(importlib)) and isinstance(new, type(importlib)):
        names = getattr(new, "__all__")
        return all(getattr(old, name) is getattr(new, name) for name in names)
    return old is new


@pytest.mark.parametrize("path", sorted(PUBLIC_IMPORTS))
def test_every_module_path_of_public_code_imports_and_air_migrate_moves_it_to_the_same_objects(path: str) -> None:
    """The shim runs that import unchanged, and the import ``air-migrate`` writes instead gives the very same
    objects (so the codemod never writes a path that does not exist)."""
    names = PUBLIC_IMPORTS[path]
    statement = f"from {path} import {', '.join(names)}\n"
    old: dict = {}
    exec(statement, old)
    result = migrate_file("paths.py", statement.encode(), select_rules("AM101", ""))
    assert result.migrated is not None and not [record for record in result.records if record.severity.needs_person]
    migrated = result.migrated.decode()
    assert "serverless_gpu" not in migrated
    new: dict = {}
    exec(migrated, new)
    for name in names:
        assert _same(old[name], new[name]), (path, name, migrated)


def test_the_launcher_module_has_the_same_objects_as_databricks_air_launcher() -> None:
    import serverless_gpu.launcher

    import databricks.air.launcher

    assert serverless_gpu.launcher.__all__ == databricks.air.launcher.__all__ == ["distributed"]
    assert serverless_gpu.launcher.distributed is databricks.air.launcher.distributed
    assert serverless_gpu.launcher.DistributedFunction is databricks.air.launcher.DistributedFunction


def test_the_top_level_names_are_the_same_objects() -> None:
    import serverless_gpu

    assert serverless_gpu.distributed is databricks.air.distributed
    assert serverless_gpu.__version__ == databricks.air.__version__


def test_the_ray_names_are_the_same_objects() -> None:
    import serverless_gpu
    import serverless_gpu.ray

    import databricks.air.ray

    assert (serverless_gpu.ray_launch, serverless_gpu.ray_init) == (databricks.air.ray_launch, databricks.air.ray_init)
    assert serverless_gpu.ray.__all__ == ["ray_init", "ray_launch"]
    for name in serverless_gpu.ray.__all__:
        assert getattr(serverless_gpu.ray, name) is getattr(databricks.air.ray, name)


OLD_RAY_LAUNCH = """
    import warnings
    warnings.simplefilter("always")
    from serverless_gpu.ray import ray_launch
    from serverless_gpu.exceptions import RuntimeConfigurationError

    def job():
        return 1

    with warnings.catch_warnings(record=True) as record:
        both = ray_launch(gpus=8, gpu_type="h100", remote=True)(job)  # line 11
        name_only = ray_launch(num_accelerators=8, gpu_type="GPU_8xH100", remote=True)(job)  # line 12
        value_only = ray_launch(num_accelerators=1, accelerator_type="a10", remote=True)(job)  # line 13
        new_names = ray_launch(num_accelerators=16, accelerator_type="GPU_8xH100", remote=True)(job)  # line 14
    for w in record:
        print(w.category.__name__, w.lineno, str(w.message))
    print("SHAPES", both.accelerator_type.value, name_only.accelerator_type.value, value_only.accelerator_type.value)
    try:
        ray_launch(gpus=8, num_accelerators=8)
    except RuntimeConfigurationError as error:
        print("REFUSED", error)
"""


def test_ray_launch_gets_the_same_deprecation_warnings_as_distributed(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    script = tmp_path / "old_ray_notebook.py"
    script.write_text(textwrap.dedent(OLD_RAY_LAUNCH))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    warned = [line for line in done.stdout.splitlines() if line.startswith("FutureWarning")]
    assert [line.split(" ", 2)[1] for line in warned] == ["11", "11", "12", "13"]
    assert "use num_accelerators=8 in @ray_launch instead" in warned[0]
    assert "The gpu_type parameter and its value 'h100' are deprecated" in warned[1]
    assert 'accelerator_type="GPU_8xH100" in @ray_launch' in warned[1]
    assert 'The gpu_type parameter is deprecated; use accelerator_type="GPU_8xH100" in @ray_launch' in warned[2]
    assert "accelerator_type='a10' uses a deprecated GPU type" in warned[3]
    assert 'accelerator_type="GPU_1xA10" in @ray_launch' in warned[3]
    assert "SHAPES GPU_8xH100 GPU_8xH100 GPU_1xA10" in done.stdout
    assert "REFUSED @ray_launch: cannot combine num_accelerators=8 with the deprecated gpus=8" in done.stdout


def test_exceptions_are_caught_across_both_names() -> None:
    from serverless_gpu.exceptions import GPUTypeError

    with pytest.raises(GPUTypeError):
        databricks.air.compute.AcceleratorType("nope")


def test_data_names_forward_to_databricks_air_data() -> None:
    import serverless_gpu.data

    if importlib.util.find_spec("databricks.air.data") is None:
        with pytest.raises(AttributeError, match="not part of this version yet"):
            serverless_gpu.data.DataLoader
    else:
        assert serverless_gpu.data.DataLoader is importlib.import_module("databricks.air.data").DataLoader


def test_every_public_data_name_is_the_same_object_under_serverless_gpu_data() -> None:
    import serverless_gpu.data

    data = importlib.import_module("databricks.air.data")
    reference = {"Checkpointable", "DataLoader", "UCVolumeReader", "UCVolumeWriter", "UCVolumeDataset"}
    assert set(data.__all__) == reference | {"Checkpointer"}  # Checkpointer is ours (see portability.md)
    for name in data.__all__:
        assert getattr(serverless_gpu.data, name) is getattr(data, name), name
    namespace: dict = {}
    exec("from serverless_gpu.data import *", namespace)
    assert {name: namespace[name] for name in data.__all__} == {name: getattr(data, name) for name in data.__all__}


IMPORT_LINES = """
    import warnings
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as record:
        {first}  # line 5
        import serverless_gpu.compute
        from serverless_gpu import runtime as rt
        from serverless_gpu.launcher import distributed
        import serverless_gpu.ray, serverless_gpu.api, serverless_gpu.data
    for w in record:
        print(w.category.__name__, w.lineno, str(w.message))
"""


@pytest.mark.parametrize("first", ["import serverless_gpu", "from serverless_gpu.launcher import distributed"])
def test_importing_warns_once_at_the_importing_line(tmp_path: Path, first: str) -> None:
    script = tmp_path / "old_notebook.py"
    script.write_text(textwrap.dedent(IMPORT_LINES).replace("{first}", first))
    env = {k: v for k, v in os.environ.items() if k != "DATABRICKS_AIR_SERVERLESS_GPU_WARNED"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FutureWarning")]
    assert len(lines) == 1
    assert lines[0].startswith("FutureWarning 5 serverless_gpu is deprecated")
    assert "from databricks.air import distributed" in lines[0] and "air-migrate" in lines[0]


OLD_SCRIPT = """
    import os
    import warnings
    warnings.simplefilter("always")
    {import_line}
    from serverless_gpu.compute import GPUType
    from serverless_gpu import runtime as rt

    @distributed(gpus=2, gpu_type=GPUType.H100)
    def train(scale):
        import torch.distributed as dist
        dist.init_process_group("gloo")
        result = (rt.get_global_rank() * scale, rt.get_world_size(), rt.get_local_rank())
        dist.destroy_process_group()
        return result

    print("RESULT", train.distributed(10))

    @distributed(gpus=2, gpu_type='h100')
    def again():
        return rt.get_global_rank()

    print("AGAIN", again.distributed())
"""


@pytest.mark.parametrize(
    "import_line", ["from serverless_gpu import distributed", "from serverless_gpu.launcher import distributed"]
)
@pytest.mark.slow
def test_an_unmodified_serverless_gpu_script_runs_on_cpu_ranks(tmp_path: Path, import_line: str) -> None:
    script = tmp_path / "old_script.py"
    script.write_text(textwrap.dedent(OLD_SCRIPT).replace("{import_line}", import_line))
    env = {
        **{k: v for k, v in os.environ.items() if k != "DATABRICKS_AIR_SERVERLESS_GPU_WARNED"},
        "DATABRICKS_AIR_ACCELERATOR_TYPE": "CPU",
        "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs"),
    }
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [(0, 2, 0), (10, 2, 1)]" in done.stdout
    assert "AGAIN [0, 1]" in done.stdout
    err = done.stderr
    assert err.count("serverless_gpu is deprecated") == 1  # not repeated by the ranks
    assert "old_script.py:9: FutureWarning: The gpus parameter is deprecated; use num_accelerators=2" in err
    assert "old_script.py:9: FutureWarning: The gpu_type parameter and its value" in err
    assert 'accelerator_type="GPU_8xH100"' in err
    assert "old_script.py:19: FutureWarning" in err
    assert "DATABRICKS_AIR_ACCELERATOR_TYPE=CPU: running 2 CPU rank(s) instead of accelerator_type=h100_80gb" in err
