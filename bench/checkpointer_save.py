"""``Checkpointer.save`` against ``dcp.save`` through torch's ``FileSystemWriter``, on the same model, in one run.

What it measures: a model of 16 ``Linear(2048, 2048, bias=False)`` layers (256 MiB of float32 parameters), saved
in a single process (no process group) by

* torch: ``dcp.save(model.state_dict(), storage_writer=FileSystemWriter(folder))``, a new folder each time;
* ``UCVolumeWriter`` (information): ``dcp.save(model.state_dict(), storage_writer=UCVolumeWriter(folder))``, the
  storage ours writes through, to tell its cost (checksums, manifest, synced folder) from the Checkpointer's own;
* ours: ``Checkpointer(root, keep=2).save(step, model=model)``, a new step each time, so from the third save on
  each save also removes the oldest checkpoint, on a background thread. That thread is waited for after each save,
  outside the save's time (so that it never slows the next save of either side), and its time is shown on its own
  line.

The sides take turns, the order of each round reversed from the last (torch, UCVolumeWriter, ours, ours,
UCVolumeWriter, torch, ...), REPEATS saves each after one warm-up round, median (the best, least disturbed, save of
each side is shown too); ``os.sync()`` runs before every timed save so that no side pays for another's dirty pages,
and the plain ``dcp.save`` folders are removed outside the timing. Every writer syncs every file
(``sync_files=True``, torch's default) with one writer thread; ``UCVolumeWriter`` also computes the CRC-32 of every
4 MiB (ISA-L where installed), writes and syncs the checksum manifest and syncs the folder; the Checkpointer also
takes the state through ``get_model_state_dict`` and saves a small record (step, world size). The process's CPU
time per save (all threads) is shown too: on a machine shared with other work it moves less than the wall time.
After the runs, the newest checkpoint is restored into a zeroed model and compared with the saved one.

Target: ``Checkpointer.save`` at most 1.1 x ``dcp.save`` with ``FileSystemWriter`` (wall time, median).

Run: ``.venv/bin/python bench/checkpointer_save.py``  (about a minute on 2 vCPUs; ~1 GB free in the temp dir).
Nothing asserts on time; the script exits non-zero only if the restored model differs from the saved one.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List, Tuple

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from databricks.air.data import Checkpointer, UCVolumeWriter

REPEATS = 21
MIB = 2**20


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(2048, 2048, bias=False) for _ in range(16)))


def timed(run: Callable[[], object]) -> Tuple[float, float]:
    """Wall and CPU seconds of ``run()``, after ``os.sync()``."""
    os.sync()
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    warnings.filterwarnings("ignore")
    for key, value in _machine.machine().items():
        print(f"{key:>12}: {value}")
    model = make_model()
    size_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / MIB
    scratch = tempfile.mkdtemp(prefix="air-bench-checkpointer-")
    ours = Checkpointer(os.path.join(scratch, "ours"), keep=2)
    walls: Dict[str, List[float]] = {"torch": [], "storage": [], "ours": [], "removal": []}
    cpus: Dict[str, List[float]] = {"torch": [], "storage": [], "ours": []}
    try:
        for repeat in range(REPEATS + 1):
            folder = os.path.join(scratch, f"plain-{repeat}")
            sides = {
                "torch": lambda: dcp.save(model.state_dict(), storage_writer=FileSystemWriter(folder), no_dist=True),
                "storage": lambda: dcp.save(model.state_dict(), storage_writer=UCVolumeWriter(folder), no_dist=True),
                "ours": lambda: ours.save(repeat, model=model),
            }
            for name in list(sides) if repeat % 2 == 0 else list(sides)[::-1]:
                wall, cpu = timed(sides[name])
                removal = timed(ours.wait_for_removal)[0] if name == "ours" else 0.0
                if repeat:  # the first round warms up
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    if name == "ours" and repeat >= 2:  # from the third save on, one checkpoint goes
                        walls["removal"].append(removal)
                if name != "ours":
                    shutil.rmtree(folder)
        restored = make_model()
        for parameter in restored.parameters():
            torch.nn.init.zeros_(parameter)
        if Checkpointer(ours.path).restore(model=restored) != REPEATS or any(
            not torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values())
        ):
            print("WRONG RESULT: the restored model differs from the saved one")
            sys.exit(1)
        left = sorted(os.listdir(ours.path))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    theirs = statistics.median(walls["torch"])
    print(f"\nstate: {size_mib:.0f} MiB of model parameters; {REPEATS} saves each, median; keep=2 left {left}")
    best = min(walls["torch"])
    print(
        f"{'':36} {'wall s':>7} {'MiB/s':>6} {'x torch':>8} {'cpu s':>6}  {'target':17} {'best s':>7} {'x torch':>8}"
        "  wall range"
    )
    for name, label in (
        ("torch", "dcp.save, FileSystemWriter"),
        ("storage", "dcp.save, UCVolumeWriter"),
        ("ours", "Checkpointer.save, keep=2"),
    ):
        median = statistics.median(walls[name])
        ratio = median / theirs
        verdict = {"torch": "", "storage": "(information)"}.get(name, f"<= 1.1x  {'PASS' if ratio <= 1.1 else 'MISS'}")
        print(
            f"{label:36} {median:>7.3f} {size_mib / median:>6.0f} {ratio:>7.2f}x "
            f"{statistics.median(cpus[name]):>6.3f}  {verdict:17} {min(walls[name]):>7.3f} "
            f"{min(walls[name]) / best:>7.2f}x  {min(walls[name]):.2f}-{max(walls[name]):.2f} s"
        )
    removal = walls["removal"]
    print(
        f"{'(background) removing one checkpoint':36} {statistics.median(removal):>7.3f}{'':25}(information) "
        f"{min(removal):>7.3f}{'':10}{min(removal):.2f}-{max(removal):.2f} s"
    )


if __name__ == "__main__":
    main()
