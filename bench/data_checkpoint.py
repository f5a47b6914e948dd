"""``dcp.save`` / ``dcp.load`` through ``UCVolumeWriter`` / ``UCVolumeReader`` against torch's own storage, in one run.

What it measures: a state dict of one 256 MiB float32 tensor and 16 tensors of 4 MiB (320 MiB in all), saved
with ``dcp.save`` into a folder under the temp directory and loaded back with ``dcp.load`` into preallocated
tensors, in a single process (``no_dist=True``). Each side alternates with the other (ours, torch's, ours, ...),
3 repetitions after one warm-up each, median; ``os.sync()`` runs before every timed repetition so that neither
side pays for the other's dirty pages. Both writers sync every file (``sync_files=True``, torch's default) and use
the same ``thread_count`` (1, then 4). Ours also computes the CRC-32 of every 4 MiB and checks it on load.
Every load is checked against the saved tensors.

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

REPEATS = 3
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
            }
            saves: Dict[str, List[float]] = {"torch": [], "ours": []}
            loads: Dict[str, List[float]] = {"torch": [], "ours": []}
            for repeat in range(REPEATS + 1):
                for name, (writer, reader) in sides.items():
                    folder = os.path.join(scratch, f"{name}-{threads}-{repeat}")
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
            for what, times in (("save", saves), ("load", loads)):
                ours, theirs = statistics.median(times["ours"]), statistics.median(times["torch"])
                ratio = theirs / ours
                rows.append((f"dcp.{what}, thread_count={threads}", f"{size_mib / ours:.0f} MiB/s",
                             f"{size_mib / theirs:.0f} MiB/s", ratio))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(f"{'':28} {'UCVolume*':>12} {'torch FileSystem*':>18} {'ratio':>7}  target")
    for name, ours, theirs, ratio in rows:
        print(f"{name:28} {ours:>12} {theirs:>18} {ratio:>6.2f}x  >= 0.8x  {'PASS' if ratio >= 0.8 else 'MISS'}")


if __name__ == "__main__":
    main()
