"""Lightning's ``MLFlowLogger`` under ``@distributed`` logs into the call's MLflow run (issue 33).

Made with its defaults, ``MLFlowLogger()`` creates a run of its own in experiment ``lightning_logs`` through
``MlflowClient``, which ``MLFLOW_RUN_ID`` does not steer: a call's ranks would log into a second run. In a rank,
tracking's rank side gives such a logger the call's run; a logger given an ``experiment_name`` or a ``run_id`` is
left as asked. 2 CPU ranks over gloo, DDP, a tiny model, random data.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest

from mlflow_fixtures import store  # noqa: F401 - fixture
from databricks.air import distributed

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=600)


def train_with_mlflow_logger() -> Dict[str, Any]:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.loggers import MLFlowLogger

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.linear(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    generator = torch.Generator().manual_seed(int(os.environ["RANK"]))
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator)
    )
    logger = MLFlowLogger()  # the defaults: experiment "lightning_logs", a new run, if nothing binds it
    own = MLFlowLogger(experiment_name="chosen_by_the_user")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=int(os.environ["LOCAL_WORLD_SIZE"]),
        strategy="ddp",
        max_steps=4,
        logger=[logger, own],
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=8))
    return {"logger": logger.run_id, "own": own.run_id if trainer.global_rank == 0 else None}


@pytest.mark.slow
def test_lightnings_mlflow_logger_logs_into_the_calls_run(store: str) -> None:
    pytest.importorskip("pytorch_lightning")
    import mlflow

    results = cpu2(train_with_mlflow_logger).distributed()
    client = mlflow.MlflowClient(store)
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    assert "lightning_logs" not in experiments  # no second run made in Lightning's default experiment
    runs = {run.info.run_id: run for run in client.search_runs(list(experiments.values()))}
    (call_run,) = [run for run in runs.values() if run.data.tags.get("databricks.air.version")]
    assert [r["logger"] for r in results] == [call_run.info.run_id] * 2
    assert call_run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(call_run.info.run_id, "train_loss")]
    assert len(steps) == 4, steps  # rank 0 logged every step into the call's run
    # a logger given its own experiment is left as asked: a run of its own there
    (own,) = client.search_runs([experiments["chosen_by_the_user"]])
    assert own.info.run_id == results[0]["own"] != call_run.info.run_id
