"""Per-step overhead of DDP training under ``fn.distributed()``, against ``torchrun`` running the same loop.

What it measures
    Steps per second of one DDP training loop, measured inside the ranks (launch time excluded): each rank does
    WARMUP steps, then times STEPS steps between two barriers (with ``torch.cuda.synchronize()`` on GPUs); the
    call's figure is STEPS divided by the slowest rank's time. The same function runs

    a. under ``@distributed(...)``'s ``.distributed()`` (this file is ``__main__``, so it travels by value);
    b. anchor: under ``python -m torch.distributed.run --standalone --nproc-per-node=N`` (this file as the worker).

    c. informational: (a) with ``DATABRICKS_AIR_START_METHOD=spawn`` (a fresh interpreter per rank, not a fork of
       the rank server), to tell a cost of forking from one of the launcher.

    The three alternate, REPEATS times each; the report gives the medians and the ratios. Both set the same
    thread count per rank (cores / ranks), so neither gains from torchrun's or our OMP_NUM_THREADS default. Each
    rank also reports steps per CPU second (its process's CPU time, all threads): on a machine shared with other
    work, wall-clock rates swing with the load while this one mostly does not.

Target
    (a) / (b) >= 0.97: a rank started by us trains as fast as one started by torchrun.

Run
    ``.venv/bin/python bench/ddp_step_overhead.py``         (2 CPU ranks over gloo without a GPU; ~1 minute)
    ``python bench/ddp_step_overhead.py --gpu``              (every GPU, NCCL; bench/gpu_check.sh runs this)

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero only if a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

CPU_RANKS = 2
# (hidden width, batch per rank, timed steps, warm-up steps); the GPU loop's steps take about a millisecond, so
# a per-step cost of ours would show.
SHAPES = {"cpu": (256, 64, 300, 30), "gpu": (2048, 512, 2000, 100)}
REPEATS = 3


def ddp_loop(cuda: bool, hidden: int, batch: int, steps: int, warmup: int) -> Dict[str, Any]:
    """Train a 4-layer MLP with DDP; return the steps per second of the timed part (slowest rank)."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    world = int(os.environ["WORLD_SIZE"])
    if cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers: List[nn.Module] = []
    for _ in range(3):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    model = DistributedDataParallel(
        nn.Sequential(*layers, nn.Linear(hidden, 1)).to(device), device_ids=[device.index] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, hidden, device=device)
    y = torch.randn(batch, 1, device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    # Wall time of the slowest rank, and CPU time (all of the rank's threads) of the busiest one.
    elapsed = torch.tensor(
        [time.perf_counter() - start, time.process_time() - cpu_start], dtype=torch.float64, device=device
    )
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world": world,
        "steps_per_second": steps / float(elapsed[0]),
        "steps_per_cpu_second": steps / float(elapsed[1]),
    }


def run_ours(mode: str, shape: tuple, start_method: str = "") -> Dict[str, Any]:
    from databricks.air import distributed

    if start_method:
        os.environ["DATABRICKS_AIR_START_METHOD"] = start_method
    else:
        os.environ.pop("DATABRICKS_AIR_START_METHOD", None)
    if mode == "cpu":
        fn = distributed(accelerator_type="CPU", num_accelerators=CPU_RANKS, timeout=600)(ddp_loop)
    else:
        fn = distributed(timeout=600)(ddp_loop)
    return fn.distributed(mode == "gpu", *shape)[0]


def run_torchrun(mode: str, shape: tuple, ranks: int, scratch: str) -> Dict[str, Any]:
    out = os.path.join(scratch, "torchrun_result.json")
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        os.path.abspath(__file__),
        "--worker",
        out,
        f"--{mode}",
    ]
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if done.returncode != 0:
        sys.stderr.write(done.stdout)
        raise SystemExit(f"torchrun exited with {done.returncode}")
    with open(out) as stream:
        return json.load(stream)


def worker(out: str, mode: str) -> None:
    """Entry point of a torchrun worker: run the loop, rank 0 writes the figure."""
    result = ddp_loop(mode == "gpu", *SHAPES[mode])
    if result["rank"] == 0:
        with open(out, "w") as stream:
            json.dump(result, stream)


def default_mode() -> str:
    if os.environ.get("DATABRICKS_AIR_ACCELERATOR_TYPE", "").strip().upper() == "CPU":
        return "cpu"
    import torch

    return "gpu" if torch.cuda.is_available() else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--cpu", dest="mode", action="store_const", const="cpu", help="2 CPU ranks over gloo")
    group.add_argument("--gpu", dest="mode", action="store_const", const="gpu", help="every GPU, NCCL")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--max-seconds", type=float, default=0, help="start no further round that would end past this (0: no limit)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # torchrun's side: where rank 0 writes its figure
    args = parser.parse_args()
    mode = args.mode or default_mode()
    if args.worker:
        worker(args.worker, mode)
        return

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _machine

    os.environ.setdefault("DATABRICKS_AIR_MLFLOW", "0")
    shape = SHAPES[mode]
    if mode == "cpu":
        ranks = CPU_RANKS
    else:
        from databricks.air import compute

        ranks = compute.attached_gpu_count()
    print(f"bench/ddp_step_overhead.py: DDP steps per second, .distributed() vs torchrun ({ranks} {mode} ranks)\n")
    for key, value in _machine.machine().items():
        print(f"  {key:<11} {value}")
    print(f"  loop        hidden {shape[0]}, batch {shape[1]} per rank, {shape[2]} timed steps after {shape[3]}\n")
    runs: Dict[str, List[Dict[str, Any]]] = {"ours": [], "torchrun": [], "spawn": []}
    with tempfile.TemporaryDirectory(prefix="air-bench-overhead-") as scratch:
        started = time.monotonic()
        for repeat in range(args.repeats):  # alternate, so that drifting load hits all alike
            round_start = time.monotonic()
            runs["ours"].append(run_ours(mode, shape))
            runs["torchrun"].append(run_torchrun(mode, shape, ranks, scratch))
            runs["spawn"].append(run_ours(mode, shape, start_method="spawn"))
            took = time.monotonic() - round_start
            if args.max_seconds and time.monotonic() - started + took > args.max_seconds:
                print(f"  (stopping after {repeat + 1} of {args.repeats} rounds: --max-seconds {args.max_seconds:g})")
                break
    medians = {
        (name, key): statistics.median(r[key] for r in results)
        for name, results in runs.items()
        for key in ("steps_per_second", "steps_per_cpu_second")
    }
    labels = {
        "ours": "(a) under .distributed()",
        "torchrun": "(b) anchor: torchrun",
        "spawn": "(c) .distributed(), START_METHOD=spawn",
    }
    print(f"  {'':<40} {'steps per second (wall)':>26}   {'per CPU second':>14}")
    print(f"  {'':<40} {'median':>8} {'min':>8} {'max':>8}   {'median':>14}")
    for name, label in labels.items():
        walls = [r["steps_per_second"] for r in runs[name]]
        print(
            f"  {label:<40} {medians[name, 'steps_per_second']:>8.1f} {min(walls):>8.1f} {max(walls):>8.1f}   "
            f"{medians[name, 'steps_per_cpu_second']:>14.1f}"
        )
    ratio = medians["ours", "steps_per_second"] / medians["torchrun", "steps_per_second"]
    cpu_ratio = medians["ours", "steps_per_cpu_second"] / medians["torchrun", "steps_per_cpu_second"]
    spawn_ratio = medians["spawn", "steps_per_second"] / medians["torchrun", "steps_per_second"]
    verdict = "PASS" if ratio >= 0.97 else "MISS"
    print(f"\n  ratio (a) / (b), steps per second      {ratio:.3f}   target >= 0.97   {verdict}")
    print(f"  ratio (a) / (b), steps per CPU second  {cpu_ratio:.3f}   (info: insensitive to other load)")
    print(f"  ratio (c) / (b), steps per second      {spawn_ratio:.3f}   (info: fresh interpreter per rank)")
    if args.json:
        figures = {
            "mode": mode,
            "ranks": ranks,
            "steps": shape[2],
            "repeats": len(runs["ours"]),
            "ours": medians["ours", "steps_per_second"],
            "torchrun": medians["torchrun", "steps_per_second"],
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "spawn_ratio": spawn_ratio,
            "runs": runs,
        }
        with open(args.json, "w") as stream:
            json.dump(figures, stream)


if __name__ == "__main__":
    main()
