"""What ``air run --watch`` adds to a command: submitting, snapshotting, supervising, against running it directly.

What it measures
    Wall time of a whole command, as a user waits for it, each variant as a fresh subprocess, in interleaved rounds
    (1 warm-up round, then ``ROUNDS`` timed ones; medians reported):

    a. anchor: ``bash -c 'echo hello'``;
    b. ``air run --watch -f trivial.yaml`` of the same command, with a small code folder (20 files, 80 KiB) to
       snapshot, tracking off (``DATABRICKS_AIR_MLFLOW=0``): our machinery alone;
    c. informational: (b) with MLflow tracking on, into a SQLite store made before the clock starts: adds what
       MLflow costs (its import in the supervisor, creating and ending the attempt's run, uploading its log);
    d. anchor: ``torchrun --nnodes=1 --nproc_per_node=2 ... train.py``, the DDP example (``examples/workloads``)
       for 5 steps on 2 CPU ranks, run directly in a copy of its folder;
    e. ``air run --watch -f examples/workloads/workload.yaml`` with the overrides for 2 CPU ranks and 5 steps,
       tracking off;
    f. ``environment.dependencies``: the first run with a new dependency (a wheel made here), which runs pip, and
       the second with the same list, which must not (checked in its log) and should cost what (b) costs.

Targets
    overhead (b) - (a) <= 1.5 s, and (e) - (d) <= 1.5 s (a small code folder);
    the second run with the same dependencies runs no pip install.

Run: ``.venv/bin/python bench/workload_overhead.py``  (about 3 minutes on 2 vCPUs). Nothing asserts on time; the
script prints a table and PASS/MISS per target, and exits non-zero only if a command fails.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Dict, List, Sequence

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs

ROUNDS = 5
TIMEOUT = 300
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "workloads")
AIR = os.path.join(os.path.dirname(sys.executable), "air")
CPU_OVERRIDES = ["--override", "compute.accelerator_type=CPU", "compute.num_accelerators=2", "parameters.steps=5"]


def run(argv: Sequence[str], env: Dict[str, str], cwd: str, what: str) -> float:
    """Wall time of a subprocess until it exits (output to files, not pipes); stop the benchmark if it fails."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        done = subprocess.run(
            list(argv),
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=TIMEOUT,
        )
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            out.seek(0)
            sys.stderr.write(
                f"\n{what} failed with exit status {done.returncode}:\n{out.read().decode(errors='replace')}"
            )
            raise SystemExit(1)
    return seconds


def write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return path


def wheel(folder: str, name: str) -> str:
    """A pure-Python wheel made by hand, so that the first run's pip installs it without the network."""
    dist_info = f"{name}-0.1.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    digest = {p: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode() for p, d in files.items()}
    files[f"{dist_info}/RECORD"] = (
        "".join(f"{p},sha256={digest[p]},{len(d)}\n" for p, d in files.items()) + f"{dist_info}/RECORD,,\n"
    ).encode()
    path = os.path.join(folder, f"{name}-0.1-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def row(label: str, values: List[float]) -> str:
    return (
        f"  {label:<58} median {statistics.median(values):6.2f} s   min {min(values):6.2f}   "
        f"max {max(values):6.2f}   (n={len(values)})"
    )


def main() -> None:
    print("air run --watch: the overhead of the workload command\n")
    _machine.print_machine()
    scratch = tempfile.mkdtemp(prefix="air-bench-")
    try:
        measure(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(scratch: str) -> None:
    env = {
        **os.environ,
        "DATABRICKS_AIR_HOME": os.path.join(scratch, "home"),
        "DATABRICKS_AIR_MLFLOW": "0",
        "PIP_NO_INDEX": "1",
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    for name in ("DATABRICKS_AIR_ACCELERATOR_TYPE", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        env.pop(name, None)
    code = os.path.join(scratch, "code")
    os.makedirs(code)
    for index in range(20):
        write(os.path.join(code, f"module_{index}.py"), "# padding\n" * 400)
    trivial = write(
        os.path.join(scratch, "trivial.yaml"),
        "experiment_name: bench-trivial\n"
        "compute: {accelerator_type: CPU, num_accelerators: 1}\ncode_source: {root_path: code}\n"
        "command: echo hello\nmax_retries: 0\n",
    )
    store = f"sqlite:///{os.path.join(scratch, 'mlflow.db')}"
    tracked_env = {**env, "DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": store}
    subprocess.run(
        [sys.executable, "-c", f"import mlflow; mlflow.MlflowClient({store!r}).search_experiments()"],
        check=True,
        env=env,
        capture_output=True,
    )  # the store's schema, before the clock starts
    direct = os.path.join(scratch, "direct")
    shutil.copytree(EXAMPLE, direct)
    params = write(os.path.join(scratch, "hyperparameters.yaml"), "steps: 5\nlr: 0.05\nbatch_size: 32\n")

    def torchrun() -> List[str]:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=1",
            "--node_rank=0",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            "train.py",
        ]

    torchrun_env = {**env, "HYPERPARAMETERS_PATH": params}

    variants = {
        "a": ("(a) anchor: bash -c 'echo hello'", lambda: run(["bash", "-c", "echo hello"], env, scratch, "bash")),
        "b": (
            "(b) air run --watch, trivial command, tracking off",
            lambda: run([AIR, "run", "-f", trivial, "--watch"], env, scratch, "air run (trivial)"),
        ),
        "c": (
            "(c) air run --watch, trivial command, MLflow tracking on",
            lambda: run([AIR, "run", "-f", trivial, "--watch"], tracked_env, scratch, "air run (tracked)"),
        ),
        "d": (
            "(d) anchor: torchrun, DDP example, 2 CPU ranks, 5 steps",
            lambda: run(torchrun(), torchrun_env, direct, "torchrun"),
        ),
        "e": (
            "(e) air run --watch, the same DDP example, tracking off",
            lambda: run(
                [AIR, "run", "-f", os.path.join(EXAMPLE, "workload.yaml"), "--watch", *CPU_OVERRIDES],
                env,
                scratch,
                "air run (DDP)",
            ),
        ),
    }
    times: Dict[str, List[float]] = {key: [] for key in variants}
    for round_number in range(ROUNDS + 1):
        for key, (_, measure_once) in variants.items():
            seconds = measure_once()
            if round_number:  # round 0 warms caches up
                times[key].append(seconds)
        print(f"  round {round_number}{' (warm-up)' if not round_number else ''} done", flush=True)

    wheel(scratch, "airbenchpkg")
    with_dependencies = write(
        os.path.join(scratch, "dependencies.yaml"),
        "experiment_name: bench-deps\n"
        "compute: {accelerator_type: CPU, num_accelerators: 1}\ncode_source: {root_path: code}\n"
        "environment: {dependencies: [./airbenchpkg-0.1-py3-none-any.whl]}\n"
        "command: python -c 'import airbenchpkg'\nmax_retries: 0\n",
    )
    first = run([AIR, "run", "-f", with_dependencies, "--watch"], env, scratch, "air run (dependencies, first)")
    second = run([AIR, "run", "-f", with_dependencies, "--watch"], env, scratch, "air run (dependencies, second)")
    logs = [
        subprocess.run([AIR, "logs", str(run_id)], env=env, capture_output=True, text=True).stdout
        for run_id in (runs_count(env) - 1, runs_count(env))
    ]
    pip_ran = ["[air] installing environment.dependencies" in text for text in logs]

    print()
    for key, (label, _) in variants.items():
        print(row(label, times[key]))
    print(f"  {'(f) first run with a new dependency (pip installs it)':<58} {first:6.2f} s   pip ran: {pip_ran[0]}")
    print(f"  {'(f) second run, same dependencies (cached environment)':<58} {second:6.2f} s   pip ran: {pip_ran[1]}")
    median = {key: statistics.median(values) for key, values in times.items()}
    trivial_overhead = median["b"] - median["a"]
    ddp_overhead = median["e"] - median["d"]
    print()
    print(
        f"  overhead, trivial command: (b) - (a) = {trivial_overhead:.2f} s   target <= 1.5 s   "
        f"{'PASS' if trivial_overhead <= 1.5 else 'MISS'}"
    )
    print(
        f"  overhead, torchrun DDP:    (e) - (d) = {ddp_overhead:.2f} s   target <= 1.5 s   "
        f"{'PASS' if ddp_overhead <= 1.5 else 'MISS'}"
    )
    print(f"  MLflow tracking adds:      (c) - (b) = {median['c'] - median['b']:.2f} s   (informational)")
    print(
        f"  cached environment:        second run ran pip: {pip_ran[1]}, costs (f2) - (b) = "
        f"{second - median['b']:.2f} s   target: no pip   {'PASS' if pip_ran[0] and not pip_ran[1] else 'MISS'}"
    )
    print(f"\n  load avg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def runs_count(env: Dict[str, str]) -> int:
    return len([name for name in os.listdir(os.path.join(env["DATABRICKS_AIR_HOME"], "runs")) if name.isdigit()])


if __name__ == "__main__":
    main()
