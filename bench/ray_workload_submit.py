"""What ``air run --backend ray --watch`` costs against Ray's own ``ray job submit``, on a two-node loopback cluster.

What it measures
    Wall time of a whole command, as a user waits for it, each variant a fresh subprocess, in interleaved rounds
    (1 warm-up round, then ``ROUNDS`` timed ones; medians reported), against one cluster started here:

    a. anchor: ``ray job submit --address DASHBOARD -- echo hello``, which submits the command as a Ray job and
       follows its log until it ends;
    b. ``air run -f trivial.yaml --backend ray --address DASHBOARD --watch`` of the same command (one CPU node,
       tracking off): packing the run's files, submitting the job, the supervisor on the cluster placing a
       placement group and a node host, running the command under a keeper, the log coming back per node.

Target
    b / a <= 1.5 (issue 23).

Run: ``.venv/bin/python bench/ray_workload_submit.py``  (a few minutes on 2 vCPUs). Nothing asserts on time; the
script prints a table and PASS/MISS, and exits non-zero only if a command fails.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs

ROUNDS = 5
TIMEOUT = 300
_SCRATCH = tempfile.mkdtemp(prefix="airray-bench-", dir="/tmp" if os.path.isdir("/tmp") else None)
BIN = os.path.dirname(sys.executable)
# One machine, loopback only (see the tests' ray_test_support.py): set before Ray is imported, inherited by the
# cluster's processes and by both commands.
os.environ.update(
    {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",
        "GLOO_SOCKET_IFNAME": "lo",
        "RAY_TMPDIR": _SCRATCH,
        "DATABRICKS_AIR_MLFLOW": "0",
        "DATABRICKS_AIR_HOME": os.path.join(_SCRATCH, "home"),
        "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
    }
)
for _name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "DATABRICKS_AIR_ACCELERATOR_TYPE"):
    os.environ.pop(_name, None)

from ray.cluster_utils import Cluster  # noqa: E402

from databricks.air._engine.processes import free_port  # noqa: E402


def run(argv: Sequence[str], what: str) -> float:
    """Wall time of a subprocess until it exits (output to a file, not a pipe); stop the benchmark if it fails."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        done = subprocess.run(
            list(argv), cwd=_SCRATCH, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=TIMEOUT
        )
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode(errors="replace")
        if done.returncode != 0 or "hello" not in text:
            sys.stderr.write(f"\n{what} failed with exit status {done.returncode}:\n{text}")
            raise SystemExit(1)
    return seconds


def main() -> None:
    print("air run --backend ray --watch against ray job submit\n")
    _machine.print_machine()
    node = {"node_ip_address": "127.0.0.1", "num_cpus": 2, "object_store_memory": 200 << 20}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **node,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": free_port(),
            "dashboard_agent_listen_port": free_port(),
        },
    )
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        dashboard = f"http://{cluster.webui_url}"
        workload = os.path.join(_SCRATCH, "trivial.yaml")
        with open(workload, "w", encoding="utf-8") as stream:
            stream.write(
                "experiment_name: bench-ray\ncompute: {accelerator_type: CPU, num_accelerators: 1}\n"
                "command: echo hello\nmax_retries: 0\n"
            )
        commands: Dict[str, List[str]] = {
            "a": [os.path.join(BIN, "ray"), "job", "submit", "--address", dashboard, "--", "echo", "hello"],
            "b": [
                os.path.join(BIN, "air"),
                "run",
                "-f",
                workload,
                "--backend",
                "ray",
                "--address",
                dashboard,
                "--watch",
            ],
        }
        times: Dict[str, List[float]] = {key: [] for key in commands}
        for round_number in range(ROUNDS + 1):
            for key, argv in commands.items():
                seconds = run(argv, key)
                if round_number:
                    times[key].append(seconds)
    finally:
        cluster.shutdown()
        shutil.rmtree(_SCRATCH, ignore_errors=True)
    a, b = statistics.median(times["a"]), statistics.median(times["b"])
    labels = {"a": "ray job submit -- echo hello", "b": "air run --backend ray --watch (echo hello)"}
    for key in commands:
        values = times[key]
        print(
            f"{key}. {labels[key]:<46} median {statistics.median(values):6.2f} s   min {min(values):6.2f}   "
            f"max {max(values):6.2f}   (n={len(values)})"
        )
    print(f"\nb / a = {b / a:.2f}   target <= 1.5: {'PASS' if b <= 1.5 * a else 'MISS'}")


if __name__ == "__main__":
    main()
