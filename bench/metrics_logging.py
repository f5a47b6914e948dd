"""Per-step MLflow logging from every rank: what it costs the training loop, and whether every point lands.

What it measures
    The seed page's complete example (the MLP under DDP, ``batch_size=1``, ``mlflow.log_metric("loss", ...,
    step=step)`` on every step and ``total_loss`` once per epoch, one epoch), CPU-adapted only in backend (gloo) and
    device (cpu), on 2 CPU ranks, default settings (no MLflow variable set), for each store:

    * ``sqlite``: MLflow's default store (``MLFLOW_TRACKING_URI`` unset: ``mlflow.db`` in the working directory);
    * ``server``: a local ``mlflow server`` (SQLite backend) started by this script, ``MLFLOW_TRACKING_URI`` its URL.

    For each store, one subprocess makes a warm-up call, then runs the two variants interleaved (ABBA order, so
    that neither always runs first), ``--repeats`` times each:

    a. anchor: the same loop without the per-step ``log_metric`` (``total_loss`` is still logged per epoch);
    b. the loop as written.

    Reported per variant: the loop's time per rank (``time.perf_counter()`` around the epoch loop, inside the rank;
    the slower rank's), the call's wall time, and for (b) how many ``loss`` and ``total_loss`` points the call's run
    holds when ``.distributed()`` returns (expected: one per step per rank, and one per rank). Then, in the same
    subprocess, warm calls: a 2-rank function whose only work is one ``mlflow.log_metric`` (c), against the same
    function without it (d), interleaved, ``--warm-calls`` each, medians.

    ``--samples`` sets the data set size (default: 5000, then 2000).

Targets
    loop (b) / loop (a) <= 1.15 with every point landing, for each store and data set size;
    warm call (c) - (d) <= 0.3 s.

Run: ``.venv/bin/python bench/metrics_logging.py`` (about 10 minutes on an idle 2-vCPU machine). Nothing asserts
on time: the script prints a table and PASS/MISS per target. It exits non-zero if a subprocess fails, or if a point
is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
from databricks.air._engine.processes import free_port

PYTHON = sys.executable
SUBPROCESS_TIMEOUT = 3600

# One subprocess per store: python -c CHILD <samples,...> <repeats> <warm calls>; prints one JSON line at the end.
CHILD = r"""
import json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.nn as nn

import mlflow
from databricks.air import distributed


class SimpleMLP(nn.Module):
    def __init__(self, input_dim=10, hidden_dim=64, output_dim=1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden_dim, output_dim)
        )

    def forward(self, x):
        return self.net(x)


@distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)
def run_train(num_epochs: int, batch_size: int, samples: int, log_every_step: bool):
    import mlflow
    import torch.optim as optim
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo")                      # CPU: gloo, not nccl
    device = torch.device("cpu")                         # CPU: no cuda:<LOCAL_RANK>

    model = SimpleMLP().to(device)
    model = DDP(model)

    x = torch.randn(samples, 10)
    y = torch.randn(samples, 1)

    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset)
    dataloader = DataLoader(dataset, sampler=sampler, batch_size=batch_size)

    optimizer = optim.Adam(model.parameters(), lr=0.001)
    loss_fn = nn.MSELoss()

    started = time.perf_counter()
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)
        model.train()
        total_loss = 0.0
        for step, (xb, yb) in enumerate(dataloader):
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            if log_every_step:
                mlflow.log_metric("loss", loss.item(), step=step)

            loss.backward()
            optimizer.step()
            total_loss += loss.item() * xb.size(0)

        mlflow.log_metric("total_loss", total_loss)
    loop = time.perf_counter() - started

    dist.destroy_process_group()
    return loop, os.environ["MLFLOW_RUN_ID"]


@distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)
def logs_one_metric():
    import mlflow
    mlflow.log_metric("one", 1.0)


@distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)
def logs_nothing():
    return None


def call(samples, log_every_step):
    started = time.perf_counter()
    results = run_train.distributed(num_epochs=1, batch_size=1, samples=samples, log_every_step=log_every_step)
    wall = time.perf_counter() - started
    (loop0, run_id), (loop1, _) = results
    client = mlflow.MlflowClient()
    landed = {key: len(client.get_metric_history(run_id, key)) for key in ("loss", "total_loss")}
    return {"loop": max(loop0, loop1), "wall": wall, "landed": landed, "load": os.getloadavg()[0]}


def timed(function):
    started = time.perf_counter()
    function.distributed()
    return time.perf_counter() - started


sizes = [int(s) for s in sys.argv[1].split(",")]
repeats, warm_calls = int(sys.argv[2]), int(sys.argv[3])
call(200, True)  # warm-up: starts the rank server; MLflow is imported when it is idle
report = {"sizes": {}}
for samples in sizes:
    rows = {"without": [], "with": []}
    for index in range(repeats):
        order = (False, True) if index % 2 == 0 else (True, False)
        for log_every_step in order:
            rows["with" if log_every_step else "without"].append(call(samples, log_every_step))
    report["sizes"][str(samples)] = rows
timed(logs_one_metric), timed(logs_nothing)  # warm-up of both
warm = {"one metric": [], "nothing": []}
for index in range(warm_calls):
    for name in (("one metric", "nothing") if index % 2 == 0 else ("nothing", "one metric")):
        warm[name].append(timed(logs_one_metric if name == "one metric" else logs_nothing))
report["warm"] = warm
print(json.dumps(report))
"""


def start_server(workdir: str) -> tuple:
    """A local ``mlflow server`` with a SQLite backend; (process, URL)."""
    port = free_port("127.0.0.1")
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{workdir}/server.db",
            "--default-artifact-root",
            f"{workdir}/artifacts",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600  # a loaded machine takes minutes
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    stop_server(process)
    raise SystemExit("mlflow server did not start within 600 s")


def stop_server(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def measure(store: str, workdir: str, sizes: List[int], repeats: int, warm_calls: int) -> Dict[str, Any]:
    cwd = os.path.join(workdir, store)
    os.makedirs(cwd)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DATABRICKS_AIR_"))}
    env["DATABRICKS_AIR_LOG_DIR"] = os.path.join(workdir, "logs")
    server: Optional[subprocess.Popen] = None
    if store == "server":
        server, env["MLFLOW_TRACKING_URI"] = start_server(cwd)
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            argv = [PYTHON, "-c", CHILD, ",".join(map(str, sizes)), str(repeats), str(warm_calls)]
            done = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=err, timeout=SUBPROCESS_TIMEOUT)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    finally:
        if server is not None:
            stop_server(server)
    if done.returncode != 0:
        sys.stderr.write(f"\nthe {store} subprocess failed ({done.returncode})\n{stdout}\n{stderr[-20000:]}\n")
        raise SystemExit(1)
    return json.loads(stdout.strip().splitlines()[-1])


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(store: str, data: Dict[str, Any]) -> bool:
    """Print one store's table; whether every point landed."""
    complete = True
    print(f"  store: {store}")
    print(f"    {'samples':>7} {'variant':<28} {'n':>2} {'loop/rank':>10} {'call wall':>10}   points landed")
    for samples, rows in data["sizes"].items():
        steps = int(samples) // 2  # per rank
        for name, label in (("without", "(a) without per-step logging"), ("with", "(b) as written")):
            loops = [row["loop"] for row in rows[name]]
            walls = [row["wall"] for row in rows[name]]
            landed = ""
            if name == "with":
                got = [(row["landed"]["loss"], row["landed"]["total_loss"]) for row in rows[name]]
                ok = all(loss == 2 * steps and total == 2 for loss, total in got)
                complete &= ok
                landed = (
                    f"loss {', '.join(str(g[0]) for g in got)} of {2 * steps}; total_loss "
                    f"{', '.join(str(g[1]) for g in got)} of 2" + ("" if ok else "  MISSING POINTS")
                )
            print(
                f"    {samples:>7} {label:<28} {len(loops):>2} {statistics.median(loops):>9.2f}s "
                f"{statistics.median(walls):>9.2f}s   {landed}"
            )
        ratio = statistics.median(r["loop"] for r in rows["with"]) / statistics.median(
            r["loop"] for r in rows["without"]
        )
        pairs = [w["loop"] / a["loop"] for w, a in zip(rows["with"], rows["without"])]
        print(
            f"    {samples:>7} loop (b)/(a) {ratio:.3f} (pairs: {', '.join(f'{p:.3f}' for p in pairs)})  "
            f"target <= 1.15  {verdict(ratio <= 1.15)}"
        )
    one, nothing = statistics.median(data["warm"]["one metric"]), statistics.median(data["warm"]["nothing"])
    print(
        f"    warm call, one log_metric (c) {one:.3f}s, without (d) {nothing:.3f}s "
        f"(n={len(data['warm']['nothing'])}): (c) - (d) {one - nothing:+.3f}s  target <= 0.3 s  "
        f"{verdict(one - nothing <= 0.3)}"
    )
    loads = [row["load"] for rows in data["sizes"].values() for variant in rows.values() for row in variant]
    print(f"    load average (1 min) at the end of each call: {min(loads):.1f} to {max(loads):.1f}\n")
    return complete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="5000,2000", help="data set sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=2, help="calls per variant and size")
    parser.add_argument("--warm-calls", type=int, default=8, help="warm calls per variant")
    parser.add_argument("--stores", default="sqlite,server", help="sqlite, server, or both")
    options = parser.parse_args()
    sizes = [int(s) for s in options.samples.split(",")]

    print("bench/metrics_logging.py: per-step MLflow logging on 2 CPU ranks, the seed example, default settings\n")
    _machine.print_machine()
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="air-bench-metrics-")
    complete = True
    try:
        for store in options.stores.split(","):
            complete &= report(store, measure(store, workdir, sizes, options.repeats, options.warm_calls))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"  load avg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"benchmark took {time.perf_counter() - started:.0f} s"
    )
    if not complete:
        raise SystemExit("points were lost")


if __name__ == "__main__":
    main()
