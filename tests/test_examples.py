"""The README's main example: it trains on CPU ranks here and logs every epoch into the call's MLflow run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_mlp.py"


@pytest.mark.slow
def test_train_mlp_runs_and_logs_every_epoch(tmp_path: Path) -> None:
    mlflow = pytest.importorskip("mlflow")
    env = {**os.environ, "DATABRICKS_AIR_MLFLOW": "1", "DATABRICKS_AIR_ACCELERATOR_TYPE": "CPU"}
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    assert "'rank': 0" in done.stdout and "'rank': 1" in done.stdout
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # MLflow's default store, in the working directory
    assert f"mlflow ui --backend-store-uri {uri}" in done.stderr  # where to see the run
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("train_mlp")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [0, 1, 2]
