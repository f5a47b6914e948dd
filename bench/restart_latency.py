"""Restart latency: from a rank's death to the first line of the restarted function (``max_restarts``), CPU ranks.

What it measures
    In one process, tracking off (``DATABRICKS_AIR_MLFLOW=0``; ``--tracking`` turns it on), the calls' log folders
    in a scratch folder removed at
    the end, the caller's rank server warm (an untimed call first). The function, on 2 CPU ranks: its first line
    writes ``time.time()`` to a file of its own (per attempt and rank); then ``init_process_group("gloo")`` and one
    ``all_reduce``. In attempt 0, rank 1 writes ``time.time()`` to a file and SIGKILLs itself (a rank killed
    mid-training, as the kernel's OOM killer does it) while rank 0 either waits in a second ``all_reduce`` (it
    hears of its peer's death from gloo: its connection closes) or computes (matrix products for up to 30 s, no
    collective: the launcher has to stop it).

    a. anchor (the floor): a warm call of the same function with nothing killed, from ``.distributed()`` to the
       later of the two ranks' first lines: starting every rank, which a restart has to do too;
    b. ours: with ``max_restarts=1``, from rank 1's death to the later of the two ranks' first lines in attempt 1:
       noticing the death, stopping rank 0, keeping attempt 0's files, deciding, and starting every rank again;
       rank 0 waiting in a collective;
    c. the same, rank 0 computing.

    The three take turns (the order reversed every round), ROUNDS of each after an untimed one of each; medians.
    All times are ``time.time()``
    of the same machine, taken in different processes.

Target
    (b) and (c) at most 3 s on CPU ranks with a warm rank server (issue 28). The ratios to (a) say how much of it
    is more than starting the ranks.

Run
    ``.venv/bin/python bench/restart_latency.py``  (about 10 s on 2 vCPUs); ``--tracking`` turns MLflow tracking on
    (a new SQLite store) for every side: each restart then also tags the call's run.

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero if a call returns a wrong value.
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
import time
from typing import Callable, List, TypeVar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine
from _report import median_row

ROUNDS = 7
TARGET_SECONDS = 3.0
T = TypeVar("T")


def work(folder: str, kill: bool, peer: str = "collective") -> int:
    """First line: the time this rank of this attempt started. Rank 1 of attempt 0 dies when ``kill``; meanwhile
    rank 0 waits in a collective (``peer="collective"``) or computes (``"computing"``)."""
    import os
    import time

    started = time.time()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    with open(os.path.join(folder, f"start_{attempt}_{rank}"), "w") as note:
        note.write(repr(started))

    import signal

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    if kill and attempt == 0 and rank == 1:
        with open(os.path.join(folder, "died"), "w") as note:
            note.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    if kill and attempt == 0 and peer == "computing":
        matrix = torch.randn(256, 256)
        until = time.monotonic() + 30
        while time.monotonic() < until:  # stopped by the launcher long before
            matrix = torch.tanh(matrix @ matrix)
    dist.all_reduce(total)  # rank 0 of a killed attempt waits here until its peer is found gone
    dist.destroy_process_group()
    return attempt


def read_time(path: str) -> float:
    with open(path) as note:
        return float(note.read())


def quietly(action: Callable[[], T], log: io.StringIO) -> T:
    """Run ``action`` with the calls' lines ("running ...", the restart line, "finished in ...") kept aside."""
    stderr = sys.stderr
    sys.stderr = log
    try:
        return action()
    finally:
        sys.stderr = stderr


def fresh(scratch: str, index: int) -> str:
    folder = os.path.join(scratch, f"round_{index}")
    os.makedirs(folder)
    return folder


def anchor(fn, scratch: str, index: int, log: io.StringIO) -> float:  # type: ignore[no-untyped-def]
    """Seconds from ``.distributed()`` to the later rank's first line, a warm call with nothing killed."""
    folder = fresh(scratch, index)
    called = time.time()
    values = quietly(lambda: fn.distributed(folder, False), log)
    if values != [0, 0]:
        raise SystemExit(f"anchor: wrong result {values!r}")
    return max(read_time(os.path.join(folder, f"start_0_{rank}")) for rank in (0, 1)) - called


def restart(fn, scratch: str, index: int, log: io.StringIO, peer: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds from rank 1's death to the later rank's first line in attempt 1."""
    folder = fresh(scratch, index)
    values = quietly(lambda: fn.distributed(folder, True, peer), log)
    if values != [1, 1]:
        raise SystemExit(f"restart: wrong result {values!r}")
    died = read_time(os.path.join(folder, "died"))
    return max(read_time(os.path.join(folder, f"start_1_{rank}")) for rank in (0, 1)) - died


row = functools.partial(median_row, width=72, digits=7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--tracking",
        action="store_true",
        help="MLflow tracking on, into a new SQLite store in the scratch folder (every side)",
    )
    options = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="air-bench-restart-")
    os.environ["DATABRICKS_AIR_MLFLOW"] = "1" if options.tracking else "0"
    if options.tracking:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{os.path.join(scratch, 'mlflow.db')}"
    os.environ["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
    os.environ.pop("DATABRICKS_AIR_START_METHOD", None)
    print(
        "bench/restart_latency.py: from a rank's death to the restarted function's first line, 2 CPU ranks, "
        f"MLflow tracking {'on (SQLite)' if options.tracking else 'off'} (seconds)\n"
    )
    _machine.print_machine()

    from databricks.air import distributed

    plain = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(work)
    restarting = plain.with_overrides(max_restarts=1)
    log = io.StringIO()
    bench_start = time.perf_counter()
    a: List[float] = []
    b: List[float] = []
    c: List[float] = []
    try:
        warm_start = time.perf_counter()
        anchor(plain, scratch, 0, log)  # starts the rank server
        restart(restarting, scratch, 1, log, "collective")
        restart(restarting, scratch, 2, log, "computing")
        warm_up = time.perf_counter() - warm_start
        number = 3
        for index in range(options.rounds):
            order = ("a", "b", "c") if index % 2 == 0 else ("c", "b", "a")
            for which in order:
                number += 1
                if which == "a":
                    a.append(anchor(plain, scratch, number, log))
                elif which == "b":
                    b.append(restart(restarting, scratch, number, log, "collective"))
                else:
                    c.append(restart(restarting, scratch, number, log, "computing"))
    except BaseException:
        sys.stderr.write(log.getvalue()[-20000:])
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_at_end = " ".join(f"{x:.2f}" for x in os.getloadavg())

    print(f"  warm-up (one call of each, untimed): {warm_up:.1f} s\n")
    print(f"  {'measurement':<72} {'n':>3} {'median':>7} {'min':>7} {'max':>7}")
    print(row("(a) anchor: a warm call, .distributed() to the ranks' first line", a))
    print(row("(b) restart, rank 0 in a collective: death to attempt 1's first line", b))
    print(row("(c) restart, rank 0 computing: death to attempt 1's first line", c))
    print()
    print(f"  {'':<40} {'value':>8}   target")
    for label, values in (("b", b), ("c", c)):
        median = statistics.median(values)
        print(
            f"  {f'restart latency, median ({label})':<40} {median:>8.3f}   <= {TARGET_SECONDS:.1f} s   "
            f"{'PASS' if median <= TARGET_SECONDS else 'MISS'}"
        )
    for label, values in (("b", b), ("c", c)):
        ratio = statistics.median(values) / statistics.median(a)
        print(f"  {f'ratio to a warm start ({label} / a)':<40} {ratio:>8.2f}   (information)")
    for label, values in (("a", a), ("b", b), ("c", c)):
        print(f"  per-round ({label}): {', '.join(f'{x:.3f}' for x in values)}")
    print(f"\n  load avg at the end: {load_at_end}; benchmark took {time.perf_counter() - bench_start:.0f} s")


if __name__ == "__main__":
    main()
