"""What the hang report costs a call that does not hang: a warm call, and DDP steps, with and without it.

What it measures
    The same work, alternating between

    a. the defaults: every rank runs its probe (an idle thread, a stack-dump signal handler), and the call watches
       for stalls;
    b. anchor: ``DATABRICKS_AIR_SNAPSHOT_SECONDS=0`` and ``DATABRICKS_AIR_STALL_SECONDS=0``, which turn the whole
       feature off (no probe in the ranks, no stall watch, no snapshot);

    for two workloads:

    * a warm call: ``.distributed()`` of a function that returns at once, on 2 CPU ranks (the rank server warm),
      CALLS calls per variant per round, the median;
    * the DDP loop of ``bench/ddp_step_overhead.py`` (steps per second inside the ranks, and per CPU second).

Target
    (a) within 3 % of (b): a warm call at most 1.03 times as long, DDP at least 0.97 times the steps per second.

Run
    ``.venv/bin/python bench/hang_overhead.py``   (2 CPU ranks over gloo; a few minutes)

Nothing asserts on time; it prints a table and PASS/MISS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine
from ddp_step_overhead import SHAPES, ddp_loop

RANKS = 2
CALLS = 15
ROUNDS = 5
OFF = {"DATABRICKS_AIR_SNAPSHOT_SECONDS": "0", "DATABRICKS_AIR_STALL_SECONDS": "0"}


def returns_at_once() -> None:
    return None


def with_variant(on: bool) -> None:
    for name, value in OFF.items():
        if on:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def warm_call_seconds(on: bool) -> float:
    from databricks.air import distributed

    with_variant(on)
    call = distributed(accelerator_type="CPU", num_accelerators=RANKS, timeout=600)(returns_at_once)
    times = []
    for _ in range(CALLS):
        started = time.perf_counter()
        call.distributed()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ddp_rates(on: bool) -> Dict[str, float]:
    from databricks.air import distributed

    with_variant(on)
    call = distributed(accelerator_type="CPU", num_accelerators=RANKS, timeout=600)(ddp_loop)
    return call.distributed(False, *SHAPES["cpu"])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    os.environ.setdefault("DATABRICKS_AIR_MLFLOW", "0")
    print("bench/hang_overhead.py: the hang report's cost on a call that does not hang (2 CPU ranks)\n")
    for key, value in _machine.machine().items():
        print(f"  {key:<11} {value}")
    warm_call_seconds(True)  # the rank server warm before anything is timed
    calls: Dict[bool, List[float]] = {True: [], False: []}
    steps: Dict[bool, List[Dict[str, float]]] = {True: [], False: []}
    for round_number in range(args.rounds):  # alternate, and swap the order each round, so load hits both alike
        order = (True, False) if round_number % 2 == 0 else (False, True)
        for on in order:
            calls[on].append(warm_call_seconds(on))
        for on in order:
            steps[on].append(ddp_rates(on))
    call_on, call_off = statistics.median(calls[True]), statistics.median(calls[False])
    rate = {on: statistics.median(r["steps_per_second"] for r in steps[on]) for on in (True, False)}
    cpu = {on: statistics.median(r["steps_per_cpu_second"] for r in steps[on]) for on in (True, False)}
    print(f"\n  {'':<44} {'(a) on':>10} {'(b) off':>10} {'ratio':>8}")
    print(
        f"  {'warm call, median of medians (ms)':<44} {call_on * 1e3:>10.1f} {call_off * 1e3:>10.1f} "
        f"{call_on / call_off:>8.3f}   target <= 1.03   {'PASS' if call_on / call_off <= 1.03 else 'MISS'}"
    )
    print(
        f"  {'DDP steps per second (wall)':<44} {rate[True]:>10.1f} {rate[False]:>10.1f} "
        f"{rate[True] / rate[False]:>8.3f}   target >= 0.97   {'PASS' if rate[True] / rate[False] >= 0.97 else 'MISS'}"
    )
    print(
        f"  {'DDP steps per CPU second':<44} {cpu[True]:>10.1f} {cpu[False]:>10.1f} "
        f"{cpu[True] / cpu[False]:>8.3f}   (info: insensitive to other load)"
    )
    print(
        "\n  per round, warm call ms on/off: "
        + ", ".join(f"{a * 1e3:.1f}/{b * 1e3:.1f}" for a, b in zip(calls[True], calls[False]))
    )
    print(
        "  per round, DDP steps/s on/off:  "
        + ", ".join(
            f"{a['steps_per_second']:.1f}/{b['steps_per_second']:.1f}" for a, b in zip(steps[True], steps[False])
        )
    )


if __name__ == "__main__":
    main()
