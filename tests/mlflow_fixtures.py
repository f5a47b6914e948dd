"""Fixtures and helpers for tests of MLflow tracking: a store of the test's own, a real `mlflow server`, one run.

Test modules import the fixtures by name (``from mlflow_fixtures import store``), which registers them there;
the session fixtures (``mlflow_server``, ``empty_store``) are registered once, in ``conftest.py``: a session fixture
imported into two modules would be two fixtures, and start two servers.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from process_helpers import wait_until
from databricks.air._engine.processes import free_port


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store with MLflow's tables made and migrated and nothing in them: about 1 s to make, which every
    tracked test would pay again. Tests of making a store (at once, in a fresh folder) use a path of their own."""
    import mlflow

    path = tmp_path_factory.mktemp("empty-mlflow-store") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{path}").search_experiments(max_results=1)
    return path


@pytest.fixture
def store(tmp_path: Path, empty_store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Tracking on, into a SQLite store of this test's own (a copy of an empty one, tables made); MLflow's own
    variables unset."""
    import mlflow
    from mlflow.tracking import fluent

    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for name in [name for name in os.environ if name.startswith("MLFLOW_") and name != "MLFLOW_TRACKING_URI"]:
        monkeypatch.delenv(name)
    mlflow.set_tracking_uri(uri)
    yield uri
    while mlflow.active_run():
        mlflow.end_run()
    mlflow.set_tracking_uri(None)
    fluent._active_experiment_id = None
    os.environ.pop("MLFLOW_EXPERIMENT_ID", None)  # mlflow.set_experiment sets it for subprocesses: not the next test's


def only_run(client: Any, experiment: str = "") -> Any:
    """The one run of the store, or of the named experiment (fails if there is not exactly one)."""
    if experiment:
        ids = [client.get_experiment_by_name(experiment).experiment_id]
    else:
        ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids)
    assert len(runs) == 1, [(r.info.run_name, r.info.status) for r in runs]
    return runs[0]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `mlflow server` on a free loopback port, with a SQLite backend, shared by the session's tests (it
    takes a minute to start on a loaded machine); each test uses an experiment of its own."""
    folder = tmp_path_factory.mktemp("mlflow-server")
    port = free_port("127.0.0.1")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder / 'server.db'}",
            "--default-artifact-root",
            str(folder / "artifacts"),
            "--workers",
            "1",
        ],
        # Without MLflow's job runner (Huey consumers for its GenAI jobs, which no test uses): it took about 30 s of
        # CPU time in a run of the suite.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=1):
                return True
        except OSError:
            return False

    try:
        assert wait_until(healthy, 180, interval=0.5), "mlflow server did not start"
        yield uri
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture
def served(mlflow_server: str, store: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """Tracking on, into the real `mlflow server`, in an experiment named after the test (returned)."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment(request.node.name)
    return request.node.name
