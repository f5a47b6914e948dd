"""A rank's own Python work: against a process forked from a torch-loaded parent, and a fresh interpreter.

What it measures
    The CPU time (``time.process_time``, in the process itself) of one piece of Python work: building WORK
    dictionaries of a small list each, as a data pipeline's or a tokenizer's objects are. The objects stay alive
    until the work is over, so the cyclic garbage collector runs its full collections meanwhile. Done in:

    a. ours: each of the 2 CPU ranks of a warm call (tracking off), forked from the rank server, whose preloaded
       modules are frozen (``databricks_air/_engine/frozen_imports.py``);
    b. anchor: a child ``os.fork``-ed from this process after it imported what a rank server preloads (torch,
       ``torch.distributed``, ``torch.nn``, cloudpickle) without freezing them: a rank forked that way walks the
       parent's whole heap in each full collection, writing into (and so copying) every page of it;
    c. anchor: a fresh interpreter that imported the same, then did the work: a rank started as a new process.

    One untimed call first (it starts the rank server), then ROUNDS rounds of (a), (b), (c); medians compared.

Targets
    (a) <= 0.5 x (b): the server's preloaded heap is not walked again in every rank;
    (a) <= 0.5 x (c): nor does a rank pay what a rank of torchrun or ``mp.spawn`` (a fresh interpreter, whose
    collections walk every module it imported) pays for the same work.

Run
    ``.venv/bin/python bench/rank_gc.py``  (under a minute on 2 vCPUs)

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero only if a result is wrong.
"""

from __future__ import annotations

import argparse
import functools
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine
from _report import median_row, verdict

RANKS = 2
ROUNDS = 5
WORK = 300_000
PRELOADED = ("cloudpickle", "torch", "torch.distributed", "torch.nn")


def python_work(count: int = WORK) -> float:
    """CPU seconds this process spends making ``count`` small objects that stay alive until the end."""
    import time

    start = time.process_time()
    kept = [{"index": index, "values": [index] * 3} for index in range(count)]
    spent = time.process_time() - start
    if len(kept) != count:
        raise SystemExit("wrong count")
    return spent


def in_forked_child() -> float:
    """(b): the work in a child forked from this (torch-loaded, unfrozen) process."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.write(write_end, pickle.dumps(python_work()))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        spent = pickle.loads(stream.read())
    os.waitpid(pid, 0)
    return spent


FRESH = f"""
import importlib, sys
for name in {PRELOADED!r}:
    importlib.import_module(name)
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from rank_gc import python_work
print(python_work())
"""


def in_fresh_interpreter() -> float:
    """(c): the work in a new interpreter that imported the same modules first."""
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


row = functools.partial(median_row, width=62)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    options = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="air-bench-gc-")
    os.environ["DATABRICKS_AIR_MLFLOW"] = "0"
    os.environ["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
    os.environ.pop("DATABRICKS_AIR_START_METHOD", None)
    print(f"bench/rank_gc.py: CPU seconds of {WORK:,} small objects made and kept, by where it runs\n")
    _machine.print_machine()

    import importlib

    for name in PRELOADED:  # (b)'s parent: what a rank server preloads, not frozen
        importlib.import_module(name)
    from databricks.air import distributed

    call = distributed(accelerator_type="CPU", num_accelerators=RANKS, timeout=None)(python_work)
    times: Dict[str, List[float]] = {"a": [], "b": [], "c": []}
    bench_start = time.perf_counter()
    stderr = sys.stderr
    try:
        sys.stderr = open(os.devnull, "w")  # the calls' own lines ("running ...") stay out of the report
        call.distributed()  # starts the rank server
        for _ in range(options.rounds):
            times["a"] += call.distributed()
            times["b"].append(in_forked_child())
            times["c"].append(in_fresh_interpreter())
    finally:
        sys.stderr.close()
        sys.stderr = stderr
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"  {'measurement (CPU seconds of the work)':<62} {'n':>3} {'median':>8} {'min':>8} {'max':>8}")
    print(row(f"(a) ours: in each of a warm call's {RANKS} ranks", times["a"]))
    print(row("(b) anchor: in a child forked from a torch-loaded parent", times["b"]))
    print(row("(c) anchor: in a fresh interpreter that imported torch", times["c"]))
    print()
    a, b, c = (statistics.median(times[key]) for key in "abc")
    print("  figures (medians)                                        value   target")
    print(f"  rank / unfrozen fork       (a / b)                    {a / b:>8.3f}    <= 0.5   {verdict(a / b <= 0.5)}")
    print(f"  rank / fresh interpreter   (a / c)                    {a / c:>8.3f}    <= 0.5   {verdict(a / c <= 0.5)}")
    print(f"\n  benchmark took {time.perf_counter() - bench_start:.0f} s")


if __name__ == "__main__":
    main()
