"""``dcp.save`` / ``dcp.load`` through ``UCVolumeWriter`` / ``UCVolumeReader`` against torch's own storage, in one run.

What it measures: a state dict of one 256 MiB float32 tensor and 16 tensors of 4 MiB (320 MiB in all), saved
with ``dcp.save`` into a folder under the temp directory and loaded back with ``dcp.load`` into preallocated
tensors, in a single process (``no_dist=True``). Each side alternates with the other (ours, torch's, ours, ...),
5 repetitions after one warm-up each, median; ``os.sync()`` runs before every timed repetition so that neither
side pays for the other's dirty pages. Both writers sync every file (``sync_files=True``, torch's default) and use
the same ``thread_count`` (1, then 4). Ours also computes the CRC-32 of every 4 MiB and checks it on load.
Every load is checked against the saved tensors. Also shown: ``UCVolumeReader(verify=False)``, which skips the
checksums.

Targets: save and load each >= 0.8 x torch's ``FileSystemWriter`` / ``FileSystemReader``.

Run: ``.venv/bin/python bench/data_checkpoint.py``  (about a minute on 2 vCPUs; ~1 GB free in the temp dir).
Nothing asserts on time; the script exits non-zero only if a loaded tensor differs from the saved one.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from databricks.air.data import UCVolumeReader, UCVolumeWriter

REPEATS = 5
MIB = 2**20


def make_state() -> Dict[str, torch.Tensor]:
    torch.manual_seed(0)
    state = {"big": torch.randn(64 * MIB)}  # 256 MiB of float32
    for index in range(16):
        state[f"layer{index}"] = torch.randn(MIB)
    return state


def timed(run: Callable[[], None]) -> float:
    os.sync()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    warnings.filterwarnings("ignore")
    for key, value in _machine.machine().items():
        print(f"{key:>12}: {value}")
    state = make_state()
    size_mib = sum(t.numel() * t.element_size() for t in state.values()) / MIB
    targets = {name: torch.empty_like(tensor) for name, tensor in state.items()}
    scratch = tempfile.mkdtemp(prefix="air-bench-dcp-")
    rows: List[tuple] = []
    try:
        for threads in (1, 4):
            sides = {
                "torch": (lambda path: FileSystemWriter(path, thread_count=threads), FileSystemReader),
                "ours": (lambda path: UCVolumeWriter(path, thread_count=threads), UCVolumeReader),
                "ours, verify=False": (
                    lambda path: UCVolumeWriter(path, thread_count=threads),
                    lambda path: UCVolumeReader(path, verify=False),
                ),
            }
            saves: Dict[str, List[float]] = {name: [] for name in sides}
            loads: Dict[str, List[float]] = {name: [] for name in sides}
            for repeat in range(REPEATS + 1):
                for name, (writer, reader) in sides.items():
                    folder = os.path.join(scratch, f"side{len(name)}-{threads}-{repeat}")
                    save = timed(lambda: dcp.save(state, storage_writer=writer(folder), no_dist=True))
                    for tensor in targets.values():
                        tensor.zero_()
                    load = timed(lambda: dcp.load(targets, storage_reader=reader(folder), no_dist=True))
                    for key, tensor in state.items():
                        if not torch.equal(tensor, targets[key]):
                            print(f"WRONG RESULT: {name} loaded {key} differently")
                            sys.exit(1)
                    shutil.rmtree(folder)
                    if repeat:  # the first round warms up
                        saves[name].append(save)
                        loads[name].append(load)
            theirs_save, theirs_load = statistics.median(saves["torch"]), statistics.median(loads["torch"])
            ours_save = statistics.median(saves["ours"])
            rows.append(
                (
                    f"dcp.save, thread_count={threads}",
                    size_mib / ours_save,
                    size_mib / theirs_save,
                    theirs_save / ours_save,
                    True,
                )
            )
            for name in ("ours", "ours, verify=False"):
                ours_load = statistics.median(loads[name])
                label = f"dcp.load, thread_count={threads}" + (" (verify=False)" if name != "ours" else "")
                rows.append(
                    (label, size_mib / ours_load, size_mib / theirs_load, theirs_load / ours_load, name == "ours")
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(f"{'':44} {'UCVolume*':>10} {'torch FileSystem*':>18} {'ratio':>7}  target")
    for name, ours, theirs, ratio, targeted in rows:
        verdict = f">= 0.8x  {'PASS' if ratio >= 0.8 else 'MISS'}" if targeted else "(info)"
        print(f"{name:44} {ours:>6.0f} MiB/s {theirs:>12.0f} MiB/s {ratio:>6.2f}x  {verdict}")


if __name__ == "__main__":
    main()
