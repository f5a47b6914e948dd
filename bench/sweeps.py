"""Sweeps on one node: how long ``submit`` takes to return, and how well trials pack a node's GPUs.

What it measures
    In one process, on a node that looks as if it had 8 GPUs (``DATABRICKS_AIR_SIMULATE_GPUS=8``: the GPU leases
    are real, the ranks run on CPUs), the calls' log folders and lease table in a scratch folder removed at the end.

    1. ``submit`` of a warm 1-rank call: the time until the handle comes back (median of SUBMITS), against the
       same call's ``.distributed()`` end to end (the anchor: what a caller waited for before ``submit``).
    2. Packing: trials of 1 GPU that each sleep TRIAL_SECONDS (a stand-in for training that holds its GPU), all
       submitted at once, against one such trial alone (the anchor). Eight trials fit the node at once; sixteen
       take two rounds.

Targets
    1. a warm ``submit`` returns in at most 50 ms;
    2. eight trials take at most 1.5 x one trial alone (the node is packed), sixteen at most 3 x.
    With ``--tracking`` each call is an MLflow run in a SQLite store of the scratch folder (the figures are
    recorded, not held to the targets).

Run
    ``.venv/bin/python bench/sweeps.py``  (about a minute on 2 vCPUs with warm rank servers; the first round starts
    eight, which costs seconds each there)  and  ``.venv/bin/python bench/sweeps.py --tracking``

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero only if a trial returns a wrong value.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine

SUBMITS = 9
TRIAL_SECONDS = 2.0


def trial(seconds: float, index: int) -> int:
    import time

    time.sleep(seconds)
    return index


def quick(index: int) -> int:
    return index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking", action="store_true", help="an MLflow run per call (a SQLite store)")
    arguments = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="swp", dir="/tmp")
    os.environ.update(
        DATABRICKS_AIR_SIMULATE_GPUS="8",
        DATABRICKS_AIR_LOG_DIR=os.path.join(scratch, "logs"),
        TMPDIR=scratch,
        DATABRICKS_AIR_MLFLOW="1" if arguments.tracking else "0",
        MLFLOW_TRACKING_URI=f"sqlite:///{os.path.join(scratch, 'mlflow.db')}",
    )
    tempfile.tempdir = scratch  # the lease table lives under the temp folder: this run's own
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    for name, value in _machine.machine().items():
        print(f"{name:>12}: {value}")
    print(f"{'tracking':>12}: {'on (SQLite)' if arguments.tracking else 'off'}")
    from databricks.air import distributed

    one_gpu = distributed(num_accelerators=1, timeout=600)
    quiet = io.StringIO()
    real_stderr = sys.stderr
    try:
        sys.stderr = quiet  # the calls' own lines; the report goes to stdout
        one_gpu(quick).distributed(0)  # warm: a rank server, the store
        warm = list(concurrent.futures.as_completed([one_gpu(trial).submit(0.0, i) for i in range(8)]))
        assert sorted(call.result()[0] for call in warm) == list(range(8))  # eight warm servers for the packing

        submit_seconds, call_seconds = [], []
        for index in range(SUBMITS):
            started = time.perf_counter()
            handle = one_gpu(quick).submit(index)
            submit_seconds.append(time.perf_counter() - started)
            assert handle.result()[0] == index
            started = time.perf_counter()
            assert one_gpu(quick).distributed(index)[0] == index
            call_seconds.append(time.perf_counter() - started)

        def packed(count: int) -> float:
            started = time.perf_counter()
            calls = [one_gpu(trial).submit(TRIAL_SECONDS, i) for i in range(count)]
            values = sorted(call.result()[0] for call in concurrent.futures.as_completed(calls))
            assert values == list(range(count)), values
            return time.perf_counter() - started

        alone = packed(1)
        eight = packed(8)
        sixteen = packed(16)
    finally:
        sys.stderr = real_stderr
        shutil.rmtree(scratch, ignore_errors=True)

    submit = statistics.median(submit_seconds)
    call = statistics.median(call_seconds)
    rows: List[Any] = [
        (
            "warm submit returns",
            f"{submit * 1000:.1f} ms",
            f"call end to end {call * 1000:.0f} ms",
            f"{submit / call:.3f}",
            "<= 50 ms",
            submit <= 0.050,
        ),
        (
            "8 trials of 2 s at once",
            f"{eight:.2f} s",
            f"one alone {alone:.2f} s",
            f"{eight / alone:.2f}",
            "<= 1.5 x",
            eight <= 1.5 * alone,
        ),
        (
            "16 trials of 2 s at once",
            f"{sixteen:.2f} s",
            f"one alone {alone:.2f} s",
            f"{sixteen / alone:.2f}",
            "<= 3 x",
            sixteen <= 3 * alone,
        ),
    ]
    print()
    print(f"{'measure':<26} {'ours':>10}  {'anchor':<24} {'ratio':>6}  target")
    for name, ours, anchor, ratio, target, met in rows:
        verdict = ("PASS" if met else "MISS") if not arguments.tracking else "recorded"
        print(f"{name:<26} {ours:>10}  {anchor:<24} {ratio:>6}  {target} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
