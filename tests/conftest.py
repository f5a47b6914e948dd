"""Shared fixtures: CPU ranks, per-test log directories, rank servers closed at the end, scripts in fresh interpreters.

Helpers that tests import live in ``process_helpers.py``: a module named ``conftest`` cannot be imported reliably,
since the sub-folders (``data/``, ``ray/``) have conftest modules of their own.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, List, Sequence

import pytest

from databricks.air._engine import rank_server_handle
from mlflow_fixtures import empty_store, mlflow_server  # noqa: F401 - once for the whole session (see mlflow_fixtures)


_SHARED_CLUSTER = Path(__file__).resolve().parent / "ray"


def pytest_configure(config: pytest.Config) -> None:
    # A runner that starts pytest as a background job of a shell without job control (`nohup ... &`, some CI
    # agents) hands it SIGINT ignored, and Python then installs no handler of its own: the tests that interrupt a
    # call as Ctrl-C does (SIGINT to the main thread) would wait out the call's timeout instead.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # No tracking host for anything the session starts: a script's tracked call would leave one running for 10
    # minutes after the tests. The host's own tests start theirs in a temporary folder, and stop it.
    os.environ["DATABRICKS_AIR_TRACKING_HOST"] = "0"
    # Bytecode caches written (some machines turn them off, PYTHONDONTWRITEBYTECODE=1): the suite starts about a
    # thousand fresh interpreters, and each would compile this package's modules again (60 ms of CPU time each).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


def pytest_collection_finish(session: pytest.Session) -> None:
    # Collecting imported torch, MLflow, Ray's client and libcst: hundreds of thousands of objects that live as long
    # as this process. Frozen, every later full collection of the garbage collector skips them, as a rank server's
    # ranks skip the server's (databricks_air/_engine/frozen_imports.py).
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    from databricks.air.compute import attached_gpu_count

    # Under pytest-xdist (``-n``, ``--dist loadgroup``), the tests of one shared Ray cluster run on one worker: a
    # cluster per worker would take the machine's cores from every other test.
    for item in items:
        if _SHARED_CLUSTER in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.xdist_group("ray-cluster"))
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


@pytest.fixture
def run_script(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run a Python script (dedented) in a fresh interpreter, as a notebook kernel or a user's script would;
    ``args`` are its command-line arguments."""

    def run(
        source: str, timeout: float = 120, env: dict | None = None, args: Sequence[str] = ()
    ) -> subprocess.CompletedProcess:
        path = tmp_path / "script.py"
        path.write_text(textwrap.dedent(source))
        return subprocess.run(
            [sys.executable, str(path), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
            env={**os.environ, **(env or {})},
        )

    return run
