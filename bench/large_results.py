"""Returning large tensors from ranks: 2 ranks x 256 MB float32, against torch.save + torch.load of the same data.

What it measures
    ``fn.distributed()`` where each of 2 CPU ranks returns ``torch.full((64 * 1024 * 1024,), float(rank))``
    (256 MiB of float32). Timed: later calls only (one untimed warm-up call first starts the rank server), median
    of 3, ``time.perf_counter()`` around the call. The call includes creating the tensors in the ranks, writing
    them to the engine's private call directory (under ``tempfile.gettempdir()``), loading them in the caller and
    removing the directory. Every returned value is checked (rank r's tensor is all r, float32, 64 Mi elements).

Anchor
    In this same process: ``torch.save`` of two 256 MiB float32 tensors to files in ``tempfile.gettempdir()``
    (where the engine writes its result files too) followed by ``torch.load`` of both; the tensors are created
    before the clock starts; files are deleted after each repetition (not timed). One untimed warm-up, then
    median of 3. Both sides call ``os.sync()`` (untimed) before each timed repetition, so that neither pays for
    writing back the other's dirty pages. The run points ``tempfile.tempdir`` at a private subdirectory of the
    system temp dir (same file system), so the engine's call and log directories and the anchor's files all land
    there; it is removed at the end, and any engine call directory still in it before removal is reported (there
    should be none).

Target
    our later call <= 1.5 x anchor.

Run: ``.venv/bin/python bench/large_results.py``  (about half a minute on 2 vCPUs; needs ~2 GB of free memory and
~1 GB of free space in the temp dir). Nothing asserts on time; the script exits non-zero only if a value is wrong.
"""

from __future__ import annotations

import functools
import gc
import glob
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
from _report import median_row
from typing import Dict, List

import torch

from databricks.air import distributed

ELEMENTS = 64 * 1024 * 1024  # 256 MiB of float32
WORLD_SIZE = 2
REPEATS = 3


@distributed(accelerator_type="CPU", num_accelerators=WORLD_SIZE, timeout=None)
def big_result():
    import os

    import torch

    return torch.full((64 * 1024 * 1024,), float(int(os.environ["RANK"])))


def machine() -> Dict[str, str]:
    return {
        **_machine.machine(),
        "temp dir": f"{tempfile.gettempdir()} (this run uses a private subdirectory, removed at the end)",
    }


def check(results: List[torch.Tensor]) -> None:
    if not isinstance(results, list) or len(results) != WORLD_SIZE:
        raise SystemExit(f"wrong result: expected a list of {WORLD_SIZE} tensors, got {type(results).__name__}")
    for rank, tensor in enumerate(results):
        ok = (
            isinstance(tensor, torch.Tensor)
            and tensor.dtype == torch.float32
            and tuple(tensor.shape) == (ELEMENTS,)
            and bool((tensor == float(rank)).all())
        )
        if not ok:
            raise SystemExit(f"wrong value from rank {rank}: {tensor!r}")


def ours() -> List[float]:
    big_result.distributed()  # warm-up: starts the rank server
    times = []
    for _ in range(REPEATS):
        os.sync()  # start every repetition with no dirty pages left by the previous one (both sides do this)
        start = time.perf_counter()
        results = big_result.distributed()
        times.append(time.perf_counter() - start)
        check(results)
        del results
        gc.collect()
    return times


def anchor() -> List[float]:
    tensors = [torch.full((ELEMENTS,), float(rank)) for rank in range(WORLD_SIZE)]
    times = []
    for repeat in range(REPEATS + 1):  # the first is a warm-up
        paths = [
            os.path.join(tempfile.gettempdir(), f"air-bench-anchor-{os.getpid()}-{rank}.pt")
            for rank in range(WORLD_SIZE)
        ]
        try:
            os.sync()
            start = time.perf_counter()
            for tensor, path in zip(tensors, paths):
                torch.save(tensor, path)
            loaded = [torch.load(path) for path in paths]
            seconds = time.perf_counter() - start
        finally:
            for path in paths:
                if os.path.exists(path):
                    os.unlink(path)
        check(loaded)
        del loaded
        gc.collect()
        if repeat:
            times.append(seconds)
    return times


row = functools.partial(median_row, width=50)


def main() -> None:
    print("bench/large_results.py: 2 ranks each return a 256 MiB float32 tensor (seconds)\n")
    for key, value in machine().items():
        print(f"  {key:<11} {value}")
    print()
    bench_start = time.perf_counter()
    # A private directory under the system temp dir (same file system) for the engine's call directories, its log
    # directories and the anchor's files, so that what this run leaves behind is exactly what is in it.
    system_temp = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix="air-bench-large-", dir=system_temp)
    tempfile.tempdir = private
    try:
        ours_times = ours()
        peak_after_ours = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
        anchor_times = anchor()
        leaked = sorted(glob.glob(os.path.join(private, "databricks-air-call-*")))
    finally:
        tempfile.tempdir = None
        shutil.rmtree(private, ignore_errors=True)
    print(f"  {'measurement':<50} {'n':>3} {'median':>8} {'min':>8} {'max':>8}")
    print(row("our later call: 2 x 256 MiB returned", ours_times))
    print(row("anchor: torch.save x2 + torch.load x2 (same dir)", anchor_times))
    print()
    ratio = statistics.median(ours_times) / statistics.median(anchor_times)
    print("  ratio (medians)                          value   target")
    print(f"  our call / (torch.save + torch.load)   {ratio:>7.3f}   <= 1.5   {'PASS' if ratio <= 1.5 else 'MISS'}")
    print()
    print(f"  values checked: rank r's tensor is all r ({WORLD_SIZE} ranks x {REPEATS + 1} calls)")
    print(f"  caller peak RSS after our calls: {peak_after_ours:.0f} MiB (two results are 512 MiB)")
    print(f"  engine call directories left after the calls: {len(leaked)}" + (f" {leaked[:3]}" if leaked else ""))
    print(f"\n  benchmark took {time.perf_counter() - bench_start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
