"""The example workload: torchrun over a DDP script on 2 CPU ranks reaches SUCCESS with its loss in MLflow."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from workload_support import air, envelope, events, state

mlflow = pytest.importorskip("mlflow")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "workload.yaml"


@pytest.mark.slow
def test_the_torchrun_ddp_example_trains_on_two_cpu_ranks_and_logs_its_loss(mlflow_store: str) -> None:
    experiment = f"ddp-{uuid.uuid4().hex[:8]}"
    done = air(
        "run",
        "-f",
        str(EXAMPLE),
        "--watch",
        "-o",
        "json",
        "--override",
        "compute.accelerator_type=CPU",
        "compute.num_accelerators=2",
        "parameters.steps=5",
        f"experiment_name={experiment}",
        env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": mlflow_store},
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert envelope(done)["data"]["status"] == "SUCCESS"
    steps = [e["line"] for e in events(done) if e.get("type") == "LOG" and e["line"].startswith("step ")]
    assert [line.split()[1] for line in steps] == ["0", "1", "2", "3", "4"]
    run = state(events(done)[0]["run_id"])
    client = mlflow.MlflowClient(mlflow_store)
    mlflow_run = client.get_run(run.latest.mlflow_run_id)
    assert mlflow_run.info.status == "FINISHED"
    assert client.get_experiment(mlflow_run.info.experiment_id).name == experiment
    losses = [m.value for m in sorted(client.get_metric_history(mlflow_run.info.run_id, "loss"), key=lambda m: m.step)]
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert [f"{value:.4f}" for value in losses] == [line.split()[-1] for line in steps]
