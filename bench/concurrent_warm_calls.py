"""Concurrent warm calls: four 1-rank calls from four threads at once, against the same four calls one after another.

What it measures
    In one process, tracking off (``DATABRICKS_AIR_MLFLOW=0``), the calls' log folders in a scratch folder that is
    removed at the end. The work of every call: 1 CPU rank that runs ``init_process_group("gloo")``, one
    ``all_reduce`` of a 1-element tensor and ``destroy_process_group()``, and returns its rank.

    a. anchor: the four calls one after another in this thread (the pool's warm rank server reused by each);
    b. ours: the four calls at once, each ``.distributed()`` in a thread of its own, all started together
       (a barrier), timed from the barrier until the last one returns.

    Before timing, one round of (b) and one call of (a), untimed: they start the rank servers. Then ROUNDS rounds,
    each timing (a) and (b) in ABBA order; the medians are compared. The rank servers started in each timed round
    are counted (a start is a fresh interpreter importing torch: seconds), by the pids of the handles made, seen
    through a wrapper around ``RankServerHandle.__init__`` (so the count means the same with any version of the
    pool).

Targets
    (b) <= (a): four warm calls at once take no longer than the same calls one after another; and no rank server is
    started in a timed round (a warm concurrent call never pays a cold start).

Run
    ``DATABRICKS_AIR_MLFLOW=0 .venv/bin/python bench/concurrent_warm_calls.py``  (under a minute on 2 vCPUs once the
    rank servers are warm; the warm-up round starts four, which costs about 10 to 30 s there)

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero only if a call returns a wrong value.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable, List, Set

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine
from _report import median_row

THREADS = 4
ROUNDS = 5


def work() -> int:
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return int(os.environ["RANK"]) + int(t.item())


class ServerCounter:
    """Counts the rank servers this process starts (each ``RankServerHandle`` made is a fresh interpreter)."""

    def __init__(self) -> None:
        from databricks.air._engine import rank_server_handle

        self.pids: Set[int] = set()
        original = rank_server_handle.RankServerHandle.__init__
        counter = self

        def counting_init(handle, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            original(handle, *args, **kwargs)
            counter.pids.add(handle.process.pid)  # set.add is atomic under the GIL: safe from several threads

        rank_server_handle.RankServerHandle.__init__ = counting_init  # type: ignore[method-assign]

    def count(self) -> int:
        return len(self.pids)


def one_call(fn) -> None:  # type: ignore[no-untyped-def]
    values = fn.distributed()
    if values != [1]:
        raise SystemExit(f"wrong result: {values!r}")


def sequential(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    for _ in range(THREADS):
        one_call(fn)
    return time.perf_counter() - start


def concurrent(fn) -> float:  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(THREADS + 1)
    errors: List[BaseException] = []

    def thread_main() -> None:
        barrier.wait()
        try:
            one_call(fn)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=thread_main, name=f"call {i}") for i in range(THREADS)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return seconds


def quietly(action: Callable[[], float], log: io.StringIO) -> float:
    """Run ``action`` with the calls' lines ("running ...", "finished in ...") kept out of the report."""
    stderr = sys.stderr
    sys.stderr = log
    try:
        return action()
    finally:
        sys.stderr = stderr


row = functools.partial(median_row, width=58)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    options = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="air-bench-concurrent-")
    os.environ["DATABRICKS_AIR_MLFLOW"] = "0"
    os.environ["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
    os.environ.pop("DATABRICKS_AIR_START_METHOD", None)
    print(f"bench/concurrent_warm_calls.py: {THREADS} warm 1-rank calls at once, against one after another (seconds)\n")
    _machine.print_machine()

    from databricks.air import distributed

    fn = distributed(accelerator_type="CPU", num_accelerators=1, timeout=None)(work)
    counter = ServerCounter()
    log = io.StringIO()
    bench_start = time.perf_counter()
    try:
        warm_start = time.perf_counter()
        quietly(lambda: concurrent(fn), log)
        quietly(lambda: sequential(fn), log)
        warm_up = time.perf_counter() - warm_start
        started_in_warm_up = counter.count()
        a: List[float] = []
        b: List[float] = []
        started_sequential: List[int] = []
        started_concurrent: List[int] = []
        for index in range(options.rounds):
            order = ("a", "b") if index % 2 == 0 else ("b", "a")
            for which in order:
                before = counter.count()
                if which == "a":
                    a.append(quietly(lambda: sequential(fn), log))
                    started_sequential.append(counter.count() - before)
                else:
                    b.append(quietly(lambda: concurrent(fn), log))
                    started_concurrent.append(counter.count() - before)
    except BaseException:
        sys.stderr.write(log.getvalue()[-20000:])
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"  warm-up (one round at once, one call): {warm_up:.1f} s, {started_in_warm_up} rank server(s) started\n")
    print(f"  {'measurement':<58} {'n':>3} {'median':>8} {'min':>8} {'max':>8}")
    print(row(f"(a) anchor: {THREADS} calls one after another", a))
    print(row(f"(b) {THREADS} calls at once, one thread each", b))
    print(f"  rank servers started in timed rounds: (a) {started_sequential}, (b) {started_concurrent}")
    print()
    ratio = statistics.median(b) / statistics.median(a)
    no_cold = sum(started_concurrent) == 0 and sum(started_sequential) == 0
    print("  ratios (medians)                                          value   target")
    print(
        f"  at once / one after another  (b / a)                  {ratio:>8.3f}    <= 1.0   "
        f"{'PASS' if ratio <= 1.0 else 'MISS'}"
    )
    started = sum(started_concurrent) + sum(started_sequential)
    print(
        f"  rank servers started in timed rounds                  {started:>8d}    0        "
        f"{'PASS' if no_cold else 'MISS'}"
    )
    print(f"  per-round ratios (b / a): {', '.join(f'{y / x:.2f}' for x, y in zip(a, b))}")
    print(f"\n  benchmark took {time.perf_counter() - bench_start:.0f} s")


if __name__ == "__main__":
    main()
