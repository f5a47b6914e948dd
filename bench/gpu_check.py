"""Run every check of ``bench/gpu_check.sh`` in isolation and print one table.

``python bench/gpu_check.py [--cpu] [--table FILE] [--log FILE] [--budget SECONDS]``

Each check (``bench/_gpu_checks.py``) runs in its own process group with its own wall-clock cap; a check that
overruns is killed with everything it started (its ranks included), and is a FAIL. One check's failure never stops
the next. The table is rewritten after every check, so a run cut short still leaves what it measured. Checks that no
longer fit in the overall budget are SKIPped, most important first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, TextIO

HERE = os.path.dirname(os.path.abspath(__file__))

# (check, wall-clock cap in seconds, what it shows), in the order they run: most important first.
CHECKS = [
    ("machine", 90, "GPUs, driver, torch, CUDA, NCCL"),
    ("ddp", 150, "DDP through .distributed(), every rank"),
    ("fsdp", 150, "FSDP2 fully_shard, every rank"),
    ("cuda_caller", 120, "call after the caller initialised CUDA"),
    ("seeds", 90, "fresh CPU and CUDA seeds per rank and call"),
    ("failing_rank", 120, "a failing rank: error, rank, cleanup"),
    ("timeout", 60, "timeout=5 of a sleeping function"),
    ("deepspeed", 180, "DeepSpeed ZeRO-2, every rank"),
    ("launch", 200, "cold/warm launch vs torchrun"),
    ("step_overhead", 240, "DDP steps/s vs torchrun"),
]
DEFAULT_BUDGET = 450.0  # seconds for all checks: the whole script stays under 8 minutes
MIN_USEFUL_CAP = 30.0


def kill_tree(process: subprocess.Popen) -> None:
    """Kill a check and every process it started, including rank processes in their own sessions."""
    try:
        import psutil

        try:
            family = psutil.Process(process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
    except ImportError:
        family = []
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in family:
        try:
            child.kill()
        except Exception:
            pass
    process.wait()


def run_check(name: str, cap: float, mode: str, log: TextIO) -> Dict[str, Any]:
    """Run one check in its own process group; return its result with the seconds it took."""
    with tempfile.TemporaryDirectory(prefix=f"air-gpu-check-{name}-") as scratch:
        result_path = os.path.join(scratch, "result.json")
        env = dict(os.environ)
        env["DATABRICKS_AIR_MLFLOW"] = "0"
        env["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
        env["PYTHONUNBUFFERED"] = "1"
        env["GPU_CHECK_CAP_SECONDS"] = str(int(cap))  # a check that repeats measurements may do fewer rounds
        if mode == "cpu":
            env["DATABRICKS_AIR_ACCELERATOR_TYPE"] = "CPU"
        log.write(f"\n===== {name} (cap {cap:.0f} s) {datetime.datetime.now():%H:%M:%S} =====\n")
        log.flush()
        start = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "_gpu_checks.py"), name, mode, result_path],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=scratch,
            start_new_session=True,
        )
        try:
            process.wait(timeout=cap)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        # Even a check that finished may have left something behind; none of it may outlive the check.
        kill_tree(process)
        seconds = time.monotonic() - start
        if timed_out:
            outcome = {"status": "FAIL", "detail": f"ran past its {cap:.0f} s cap and was killed; see the log"}
        elif os.path.exists(result_path):
            with open(result_path) as stream:
                outcome = json.load(stream)
        else:
            outcome = {"status": "FAIL", "detail": f"exited with status {process.returncode} without a result"}
    outcome["seconds"] = seconds
    log.write(f"----- {name}: {outcome['status']} in {seconds:.1f} s: {outcome.get('detail')}\n")
    log.write(f"----- figures: {json.dumps(outcome.get('figures', {}), default=str)}\n")
    log.flush()
    return outcome


def format_table(mode: str, results: List[tuple], elapsed: float, finished: bool) -> str:
    lines = [
        f"bench/gpu_check.sh ({'CPU dry run: 2 CPU ranks over gloo' if mode == 'cpu' else 'GPU: every GPU, NCCL'})"
        f", {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
    ]
    machine = next((outcome for name, _, outcome in results if name == "machine"), None)
    if machine:
        for key, value in machine.get("figures", {}).items():
            lines.append(f"  {key:<28} {value}")
        lines.append("")
    lines.append(f"  {'check':<14} {'status':<6} {'secs':>6}  detail")
    for name, what, outcome in results:
        lines.append(f"  {name:<14} {outcome['status']:<6} {outcome.get('seconds', 0):>6.1f}  {outcome['detail']}")
    counts = {s: sum(1 for _, _, o in results if o["status"] == s) for s in ("PASS", "FAIL", "SKIP", "MISS")}
    state = "finished" if finished else "RUNNING (partial table)"
    lines.append("")
    lines.append(
        f"  {state}: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP, {counts['MISS']} MISS "
        f"(works, performance target missed) in {elapsed:.0f} s"
    )
    return "\n".join(lines) + "\n"


def write(path: Optional[str], text: str) -> None:
    if path:
        with open(path, "w") as stream:
            stream.write(text)


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the GPU checks of bench/gpu_check.sh.")
    parser.add_argument("--cpu", action="store_true", help="dry run on 2 CPU ranks over gloo")
    parser.add_argument("--table", help="write the table here too (rewritten after every check)")
    parser.add_argument("--log", help="append every check's output here (default: a temporary file)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds for all checks")
    parser.add_argument("--only", help="comma-separated check names to run (default: all)")
    args = parser.parse_args()
    mode = "cpu" if args.cpu or os.environ.get("GPU_CHECK_CPU") == "1" else "gpu"
    only = set(args.only.split(",")) if args.only else None
    if only and only - {name for name, _, _ in CHECKS}:
        parser.error(f"unknown check(s) {sorted(only - {n for n, _, _ in CHECKS})}")
    log_path = args.log or tempfile.mkstemp(prefix="gpu_check-", suffix=".log")[1]
    start = time.monotonic()
    results: List[tuple] = []
    with open(log_path, "a") as log:
        for name, cap, what in CHECKS:
            if only and name not in only:
                continue
            left = args.budget - (time.monotonic() - start)
            if left < MIN_USEFUL_CAP:
                outcome = {"status": "SKIP", "detail": f"no time left in the {args.budget:.0f} s budget", "seconds": 0}
            else:
                print(f"gpu_check: {name}: {what} (cap {min(cap, left):.0f} s) ...", flush=True)
                outcome = run_check(name, min(cap, left), mode, log)
                print(f"gpu_check: {name}: {outcome['status']} in {outcome['seconds']:.1f} s", flush=True)
            results.append((name, what, outcome))
            write(args.table, format_table(mode, results, time.monotonic() - start, finished=False))
    table = format_table(mode, results, time.monotonic() - start, finished=True)
    write(args.table, table)
    print()
    print(table, end="")
    print(f"\n  full log: {log_path}")
    return 1 if any(o["status"] == "FAIL" for _, _, o in results) else 0


if __name__ == "__main__":
    sys.exit(main())
