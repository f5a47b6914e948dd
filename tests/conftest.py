"""Shared fixtures: CPU ranks, per-test log directories, and helpers to find leftover processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, List

import psutil
import pytest

from databricks.air._engine import rank_server_handle


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    from databricks.air.compute import attached_gpu_count

    if attached_gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _call_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test logs into its own directory; the grace period is short so failures stay fast."""
    monkeypatch.setenv("DATABRICKS_AIR_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "0")  # tests of tracking turn it on, with a store of their own
    monkeypatch.delenv("DATABRICKS_AIR_ACCELERATOR_TYPE", raising=False)
    monkeypatch.delenv("DATABRICKS_AIR_SHOW_ALL_RANKS", raising=False)
    monkeypatch.delenv("DATABRICKS_AIR_START_METHOD", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _close_rank_servers() -> None:
    yield
    rank_server_handle.pool.close_all()


def server_descendants() -> List[psutil.Process]:
    """Every process below this process's rank servers (ranks, their children)."""
    found = []
    for child in psutil.Process().children():
        try:
            if "databricks.air._engine.rank_server" in " ".join(child.cmdline()):
                found += child.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
    return [p for p in found if _alive(p)]


def processes_with_marker(marker: str) -> List[psutil.Process]:
    """Live processes whose environment contains ``AIR_TEST_MARKER=<marker>``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("AIR_TEST_MARKER") == marker and _alive(process):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


@pytest.fixture
def run_script(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run a Python script (dedented) in a fresh interpreter, as a notebook kernel or a user's script would."""

    def run(source: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        path = tmp_path / "script.py"
        path.write_text(textwrap.dedent(source))
        return subprocess.run(
            [sys.executable, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
            env={**os.environ, **(env or {})},
        )

    return run
