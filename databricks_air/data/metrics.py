"""How long the training loop waits for each batch, logged every few seconds (to MLflow by default).

Per batch, two times: inside ``next()`` (waiting for data: ``fetch_seconds``) and between two ``next()`` calls
(the training step: ``between_next_seconds``). Every ``interval`` seconds, and when a pass ends, the window's mean
and population variance are logged under the reference's metric names::

    dataloader/fetch_seconds/rank_<R>            dataloader/fetch_seconds_variance/rank_<R>
    dataloader/between_next_seconds/rank_<R>     dataloader/between_next_seconds_variance/rank_<R>

with the loader's batch count as the step. The sink is a callable ``sink(metrics: dict, step: int)``; the default
logs into the active MLflow run, or the run named by ``MLFLOW_RUN_ID`` (which ``.distributed()`` sets in each
rank), and does nothing when there is neither, when ``DATABRICKS_AIR_MLFLOW=0``, or when MLflow fails (a warning).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Callable, Dict, List, Optional

from databricks.air import _variables
from databricks.air._switches import switched_off
from databricks.air.data import waiting

Sink = Callable[[Dict[str, float], int], None]

_log = logging.getLogger("databricks.air.data")


def mlflow_sink() -> Optional[Sink]:
    """A sink into the current MLflow run, or ``None`` when there is no run to log into."""
    if switched_off(_variables.MLFLOW):
        return None
    run_id = None
    mlflow = sys.modules.get("mlflow")  # never import MLflow (seconds) just to find out there is no run
    if mlflow is not None and not getattr(getattr(mlflow, "__spec__", None), "_initializing", False):
        active = mlflow.active_run()  # (while a thread still imports it, no run can have been started)
        run_id = active.info.run_id if active is not None else None
    run_id = run_id or os.environ.get("MLFLOW_RUN_ID")
    if not run_id:
        return None

    def log(metrics: Dict[str, float], step: int) -> None:
        import mlflow
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        mlflow.MlflowClient().log_batch(
            run_id, metrics=[Metric(key, value, stamp, step) for key, value in metrics.items()], synchronous=True
        )

    return log


class BatchTimer:
    """Collects per-batch times and hands window statistics to a sink."""

    def __init__(self, rank: int, sink: Optional[Sink], interval: float = 10.0) -> None:
        self.rank = rank
        self.sink = sink
        self.interval = interval
        self.step = 0
        self._fetch: List[float] = []
        self._between: List[float] = []
        self._window_start = time.monotonic()
        self._last_return: Optional[float] = None
        self._failed = False

    def started(self) -> float:
        now = time.perf_counter()
        if self._last_return is not None:
            self._between.append(now - self._last_return)
        return now

    def delivered(self, started: float) -> None:
        now = time.perf_counter()
        self._fetch.append(now - started)
        waiting.add(now - started)  # for the launcher's straggler watch
        self._last_return = now
        self.step += 1
        if time.monotonic() - self._window_start >= self.interval:
            self.flush()

    def pass_ended(self) -> None:
        self._last_return = None
        self.flush()

    def flush(self) -> None:
        self._window_start = time.monotonic()
        if self.sink is None or self._failed or not (self._fetch or self._between):
            self._fetch, self._between = [], []
            return
        metrics: Dict[str, float] = {}
        for name, values in (("fetch_seconds", self._fetch), ("between_next_seconds", self._between)):
            if values:
                mean = sum(values) / len(values)
                metrics[f"dataloader/{name}/rank_{self.rank}"] = mean
                metrics[f"dataloader/{name}_variance/rank_{self.rank}"] = sum((v - mean) ** 2 for v in values) / len(
                    values
                )
        self._fetch, self._between = [], []
        try:
            self.sink(metrics, self.step)
        except Exception as error:  # noqa: BLE001 - metrics must never stop training
            self._failed = True
            _log.warning("DataLoader timing metrics could not be logged (%s); not trying again", error)
