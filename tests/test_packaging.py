"""The installed layout: import names, the namespace package, the console script."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import databricks.air


def test_we_ship_no_databricks_init_so_databricks_sdk_can_coexist() -> None:
    shipped = [str(f) for f in importlib.metadata.files("databricks-air-oss") or []]
    assert "databricks/__init__.py" not in shipped
    assert importlib.util.find_spec("databricks.air") is not None
    if importlib.util.find_spec("databricks.sdk") is not None:  # mlflow installs it: both import side by side
        importlib.import_module("databricks.sdk")


def test_version_matches_the_distribution() -> None:
    assert databricks.air.__version__ == importlib.metadata.version("databricks-air-oss")
    assert set(databricks.air.__all__) >= {"distributed", "__version__"}


def test_importing_the_package_does_not_import_torch_or_mlflow() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, databricks.air; print('torch' in sys.modules, 'mlflow' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "False False"


def test_air_migrate_is_installed_as_a_command(tmp_path: Path) -> None:
    executable = Path(sys.executable).with_name("air-migrate")
    assert executable.exists()
    usage = subprocess.run([executable], capture_output=True, text=True)
    assert usage.returncode == 2 and "give at least one file or directory" in usage.stderr
    (tmp_path / "job.py").write_text("from serverless_gpu import distributed\n")
    done = subprocess.run([executable, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "job.py").read_text() == "from databricks.air import distributed\n"
