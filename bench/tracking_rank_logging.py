"""What a call's MLflow run costs on a later call, when its ranks log nothing, one metric, or a hundred.

What it measures
    Later calls (the rank server warm, MLflow imported, the SQLite store made) of a 2-rank CPU function whose rank 0
    calls ``mlflow.log_metric`` N times, in one process, rounds interleaved:

    a. anchor: tracking off (``DATABRICKS_AIR_MLFLOW=0``), N = 0;
    b. tracking on, N = 0: the run alone (created, logs uploaded, ended);
    c. tracking on, N = 1: a rank's first MLflow call attaches to the run and opens the store in the rank;
    d. tracking on, N = 100.

    System metrics are off, so that their monitor's start and stop are not counted. Median of 5 rounds after one
    warm-up round; each result is printed with its ratio to (a).

Targets
    None: informational. ``docs/tracking.md`` quotes these figures.

Run: ``.venv/bin/python bench/tracking_rank_logging.py`` (a minute or two on 2 vCPUs). It works in a scratch folder
(the store, ``mlflow.db``, and the call logs go there) that is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

ROUNDS = 5
VARIANTS = {
    "(a) tracking off, no metric": (False, 0),
    "(b) tracking on, no metric": (True, 0),
    "(c) tracking on, 1 metric from rank 0": (True, 1),
    "(d) tracking on, 100 metrics from rank 0": (True, 100),
}


def main() -> None:
    scratch = tempfile.mkdtemp(prefix="air-bench-tracking-")
    os.chdir(scratch)
    os.environ["DATABRICKS_AIR_SYSTEM_METRICS"] = "0"
    os.environ["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
    try:
        import mlflow

        from databricks.air import distributed

        mlflow.set_tracking_uri(f"sqlite:///{scratch}/mlflow.db")
        mlflow.set_experiment("bench-tracking")

        @distributed(accelerator_type="CPU", num_accelerators=2, timeout=600)
        def work(metrics: int) -> int:
            import os

            if metrics and os.environ["RANK"] == "0":
                import mlflow

                for step in range(metrics):
                    mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
            return metrics

        times: Dict[str, List[float]] = {name: [] for name in VARIANTS}
        for round_number in range(ROUNDS + 1):
            for name, (tracking, metrics) in VARIANTS.items():
                os.environ["DATABRICKS_AIR_MLFLOW"] = "1" if tracking else "0"
                started = time.perf_counter()
                assert work.distributed(metrics) == [metrics, metrics]
                if round_number:  # the first round warms up
                    times[name].append(time.perf_counter() - started)
        anchor = statistics.median(times["(a) tracking off, no metric"])
        print(f"later calls of a 2-rank CPU function, median of {ROUNDS} interleaved rounds")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"  {name:<44} {median:7.3f} s  x{median / anchor:5.1f}   ({min(values):.3f} to {max(values):.3f})")
    finally:
        os.chdir("/")
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
