"""What the straggler watch costs: DDP steps per second in the ranks, and CPU time in the caller.

What it measures
    Three parts; 1 and 3 alternate between the watch off (``DATABRICKS_AIR_STRAGGLER_SECONDS=0``, the anchor) and
    on (1: DDP_ROUNDS rounds, each in another order, the ratio the median of each round's; 3: ROUNDS rounds):

    1. **DDP steps per second** (the loop of ``bench/ddp_step_overhead.py``, 2 CPU ranks, DDP_STEPS timed steps:
       long enough for several looks), inside the ranks, with the watch off, at its default (30 s) and every
       FAST_SECONDS (a worst case: each look makes every rank dump its whole flight recorder);
    2. **one look, in a rank**: the probe's whole answer to the watch (the flight recorder's dump, the entries
       since the last look, the JSON) in a rank whose recorder is full, wall and CPU time; at the default interval
       its share of the rank's time is that over 30 s (robust to the machine's load, unlike 1);
    3. **the caller's CPU time** for RANKS_8 CPU ranks that each issue RATE all-reduces a second for CALL_SECONDS:
       the caller process's CPU time (all its threads: the poll loop, the stall watch, and the straggler watch's
       asks and arithmetic) over the call's wall time, with the watch off, at its default and every FAST_SECONDS.
       The watch's cost is the difference from the anchor, as a share of one core.

Target
    (1, 2) at the default: at most 1 % of the DDP steps per second; (3) at the default: at most 2 % of a core more
    than with the watch off.

Run
    ``.venv/bin/python bench/straggler_overhead.py``   (2 CPU ranks, then 8; about 20 minutes)
    ``.venv/bin/python bench/straggler_overhead.py --only ddp|look|caller``   (one part)

Nothing asserts on time; it prints a table and PASS/MISS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine
from ddp_step_overhead import ddp_loop

VARIABLE = "DATABRICKS_AIR_STRAGGLER_SECONDS"
VARIANTS = {"off": "0", "default (30 s)": "", "every 5 s": "5"}
FAST_SECONDS = 5
ROUNDS = 3
DDP_ROUNDS = 6
DDP_SHAPE = (256, 64, 4000, 50)  # hidden, batch, timed steps, warm-up: about 20 s a run here
RANKS_8 = 8
RATE = 100
CALL_SECONDS = 65.0


def paced_all_reduces(rate: float, seconds: float) -> Dict[str, float]:
    """Issue ``rate * seconds`` all-reduces, ``rate`` a second; return how many were issued per second."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.barrier()
    start = time.monotonic()
    count = int(rate * seconds)
    for index in range(count):
        wait = start + index / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        dist.all_reduce(tensor)
    achieved = count / (time.monotonic() - start)
    dist.destroy_process_group()
    return {"rate": achieved}


def one_look_in_a_rank(fill: int, repeats: int) -> Dict[str, float]:
    """After ``fill`` all-reduces (the flight recorder's ring full), what answering one look costs this rank: the
    probe's whole answer to ``times`` (the dump, the reading, the JSON), with nothing seen yet and with all but the
    last 100 seen; wall and CPU seconds, medians."""
    import json

    import torch
    import torch.distributed as dist

    from databricks.air._engine import rank_probe

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    for _ in range(fill):
        dist.all_reduce(tensor)
    dist.barrier()
    figures: Dict[str, float] = {}
    for name, request in (("all", "times {}"), ("last 100", 'times {"0": %d}' % (fill - 100))):
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.thread_time()
            answer = json.dumps(rank_probe.answer(request))
            walls.append(time.perf_counter() - wall)
            cpus.append(time.thread_time() - cpu)
        figures[f"{name} wall"] = statistics.median(walls)
        figures[f"{name} cpu"] = statistics.median(cpus)
        figures[f"{name} bytes"] = len(answer)
    dist.destroy_process_group()
    return figures


def set_variant(value: str) -> None:
    if value:
        os.environ[VARIABLE] = value
    else:
        os.environ.pop(VARIABLE, None)


def ddp_round(value: str) -> Dict[str, Any]:
    from databricks.air import distributed

    set_variant(value)
    function = distributed(accelerator_type="CPU", num_accelerators=2, timeout=900)(ddp_loop)
    return function.distributed(False, *DDP_SHAPE)[0]


def caller_round(value: str) -> Dict[str, float]:
    from databricks.air import distributed

    set_variant(value)
    function = distributed(accelerator_type="CPU", num_accelerators=RANKS_8, timeout=900)(paced_all_reduces)
    cpu, wall = time.process_time(), time.monotonic()
    results = function.distributed(RATE, CALL_SECONDS)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    return {"cpu_share": cpu / wall, "cpu_seconds": cpu, "wall": wall, "rate": min(r["rate"] for r in results)}


def _listed(runs: List[Dict[str, Any]]) -> str:
    return ", ".join(f"{run['steps_per_second']:.1f}" for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the caller's part")
    parser.add_argument("--ddp-rounds", type=int, default=DDP_ROUNDS, help="rounds of the DDP part")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--only", choices=["ddp", "caller", "look"], help="run one of the three parts")
    args = parser.parse_args()
    os.environ.setdefault("DATABRICKS_AIR_MLFLOW", "0")
    VARIANTS["every 5 s"] = str(FAST_SECONDS)
    print("bench/straggler_overhead.py: what the straggler watch costs\n")
    _machine.print_machine()
    figures: Dict[str, Any] = {}
    if args.only in (None, "ddp"):
        runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in VARIANTS}
        ddp_round("0")  # warm: the rank server, torch's first DDP
        names = list(VARIANTS)
        for round_number in range(args.ddp_rounds):  # the order turns each round: drifting load hits all alike
            for name in names[round_number % len(names) :] + names[: round_number % len(names)]:
                runs[name].append(ddp_round(VARIANTS[name]))
        print(
            f"  1. DDP, 2 CPU ranks, {DDP_SHAPE[2]} timed steps: steps per second; the ratio to 'off' is the median "
            f"of each round's ratio ({args.ddp_rounds} rounds)"
        )
        ratios: Dict[str, float] = {}
        for name in VARIANTS:
            wall = statistics.median(r["steps_per_second"] for r in runs[name])
            ratios[name] = statistics.median(
                on["steps_per_second"] / off["steps_per_second"] for on, off in zip(runs[name], runs["off"])
            )
            cpu_ratio = statistics.median(
                on["steps_per_cpu_second"] / off["steps_per_cpu_second"] for on, off in zip(runs[name], runs["off"])
            )
            print(
                f"     {name:<16} {wall:>8.1f}  ({ratios[name]:.3f} x off; per CPU second {cpu_ratio:.3f} x)   "
                f"all: {_listed(runs[name])}"
            )
        ratio = ratios["default (30 s)"]
        print(
            f"     default / off {ratio:.3f}   target >= 0.99   {'PASS' if ratio >= 0.99 else 'MISS'}   (a loop "
            "shorter than 30 s has no look at the default: the 5 s row is the one that pays for looks)\n"
        )
        figures["ddp"] = {"runs": runs, "ratios": ratios}
    if args.only in (None, "look"):
        from databricks.air import distributed

        set_variant("0")
        look = distributed(accelerator_type="CPU", num_accelerators=2, timeout=900)(one_look_in_a_rank)
        ranks = look.distributed(2500, 15)
        print(
            "  2. one look, in a rank whose flight recorder is full (2,000 entries): its probe's answer (median of 15)"
        )
        for name in ("all", "last 100"):
            wall = max(r[f"{name} wall"] for r in ranks)
            cpu = max(r[f"{name} cpu"] for r in ranks)
            print(
                f"     entries since the last look: {name:<9} {wall * 1000:>6.1f} ms wall, {cpu * 1000:>6.1f} ms CPU, "
                f"{int(ranks[0][f'{name} bytes'])} bytes; every 30 s: {wall / 30 * 100:.2f} % of the rank's time"
            )
        share = max(r["all wall"] for r in ranks) / 30
        print(
            f"     a full ring every 30 s: {share * 100:.2f} % of the rank's time   target <= 1 %   "
            f"{'PASS' if share <= 0.01 else 'MISS'}\n"
        )
        figures["look"] = ranks
    if args.only in (None, "caller"):
        calls: Dict[str, List[Dict[str, float]]] = {name: [] for name in VARIANTS}
        for _ in range(args.rounds):
            for name, value in VARIANTS.items():
                calls[name].append(caller_round(value))
        print(
            f"  3. the caller, {RANKS_8} CPU ranks at {RATE} all-reduces/s for {CALL_SECONDS:g} s: caller CPU time "
            f"per wall second (median of {args.rounds})"
        )
        base = statistics.median(c["cpu_share"] for c in calls["off"])
        for name in VARIANTS:
            share = statistics.median(c["cpu_share"] for c in calls[name])
            rate = statistics.median(c["rate"] for c in calls[name])
            print(
                f"     {name:<16} {share * 100:>6.2f} % of a core  ({(share - base) * 100:+.2f} points)   "
                f"all-reduces/s reached {rate:.0f}"
            )
        extra = statistics.median(c["cpu_share"] for c in calls["default (30 s)"]) - base
        print(
            f"     default - off {extra * 100:+.2f} % of a core   target <= 2 %   {'PASS' if extra <= 0.02 else 'MISS'}"
        )
        figures["caller"] = {"calls": calls, "extra": extra}
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(figures, stream)


if __name__ == "__main__":
    main()
