"""Each workload test has a registry of its own (``DATABRICKS_AIR_HOME``), short retry delays and grace periods."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _air_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "air-home"
    monkeypatch.setenv("DATABRICKS_AIR_HOME", str(home))
    monkeypatch.setenv("DATABRICKS_AIR_RETRY_DELAY_SECONDS", "0")
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing from the network: tests install wheels they build
    for name in (
        "DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_EXPERIMENT_ID",
        "MLFLOW_RUN_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite MLflow store for the session (its schema is made once: that takes seconds); tests tell their runs
    apart by experiment name."""
    import mlflow

    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    mlflow.MlflowClient(uri).search_experiments()  # creates the schema now, not in the first test's supervisor
    return uri
