"""Throughput of ``UCVolumeDataset`` + ``DataLoader`` against plain reads of the same files, in one run.

What it measures (all on files made in a scratch folder under the temp directory, removed at the end):

    G1  warm epoch: 1000 files of 256 KiB, ``cache=True`` with every copy already cached,
        ``DataLoader(batch_size=32, num_workers=0)``; the loop opens and reads each yielded file. Anchor: the same
        loop over the source files in listing order (plain sequential reads). Both read from the page cache.
        Target: >= 0.8 x anchor. Also shown: plain reads of the cached copies themselves (on a VM, two sets of
        identical files in the page cache can read 15 % apart, depending on where the guest's pages landed: this
        ratio is the loader's own cost), ``cache="auto"`` on the local folder (no copies: the files are read in
        place), and torch's own ``DataLoader`` over a list of the same paths.
    G2  cold epoch over a slow volume: 3000 files of 16 KiB behind a volume shim that adds 5 ms to every file
        copied (``time.sleep``, as a network mount's latency), ``num_workers=2``, 8 I/O threads per worker, an
        empty cache, batches of 32. Anchor: one thread copying the same files through the same shim (~190
        files/s). Target: >= 2100 files/s.
    G3  per-item overhead: 20,000 empty files, ``cache=True`` and warm, one process: items per second from
        iterating the dataset directly, and from ``DataLoader(batch_size=64, num_workers=0)``. Target: >= 20,000/s.
        (With ``batch_size=None`` every item is a batch, and torch's own per-batch cost, shown as an anchor for
        a plain list of paths, dominates.)
    G4  start-up: a fresh 10,000-file folder: listing (``UCVolumeDataset(...)``) and the time to the first batch of
        ``DataLoader(batch_size=32, num_workers=2)``. Targets: first batch <= 1 s, listing >= 50,000 entries/s.

Each figure is the median of 3 repetitions (G1: 9), the variants of a target taking turns in a shuffled order, so
that no variant always runs after the same other one (G4: 3 fresh datasets over the same folder); ``os.sync()``
runs before timing, so no side pays for writing back another's files. Nothing asserts on
time: the script prints a table, the ratios and PASS/MISS. It exits non-zero only if an epoch yields wrong files.

Run: ``.venv/bin/python bench/data_loading.py``  (about a minute on 2 vCPUs; needs ~600 MB in the temp dir).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
import torch.utils.data

from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.filesystem import VolumeFileSystem

REPEATS = 3
SHIM_DELAY = 0.005


class SlowVolume(VolumeFileSystem):
    """A local folder that behaves like a network mount: 5 ms of latency per file copied."""

    def is_local(self, path: str) -> bool:
        return False

    def copy(self, source: str, destination: str) -> None:
        time.sleep(SHIM_DELAY)
        super().copy(source, destination)


def make_files(folder: str, count: int, size: int) -> None:
    os.makedirs(folder, exist_ok=True)
    payload = os.urandom(size)
    for index in range(count):
        with open(os.path.join(folder, f"{index:06d}.bin"), "wb") as stream:
            stream.write(payload)


def read_all(paths) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as stream:
            total += len(stream.read())
    return total


def median_seconds(run: Callable[[], object]) -> float:
    return interleaved_medians({"run": run})["run"]


def interleaved_medians(runs: Dict[str, Callable[[], object]], repeats: int = REPEATS) -> Dict[str, float]:
    """Median seconds of each run, the runs taking turns in a shuffled order (seeded), so that noise from the
    shared machine, and whatever one run leaves in the caches for the next, hit all alike."""
    times: Dict[str, List[float]] = {name: [] for name in runs}
    order = list(runs)
    shuffler = random.Random(0)
    for _ in range(repeats):
        shuffler.shuffle(order)
        for name in order:
            started = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def check(condition: bool, what: str) -> None:
    if not condition:
        print(f"WRONG RESULT: {what}")
        sys.exit(1)


def read_batches(loader) -> int:
    return sum(read_all(batch) for batch in loader)


def g1_warm_epoch(scratch: str) -> Dict[str, float]:
    folder = os.path.join(scratch, "g1")
    count, size = 1000, 256 * 1024
    make_files(folder, count, size)
    sources = [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
    read_all(sources)  # warm the page cache
    mib = count * size / 2**20
    cached = UCVolumeDataset(folder, cache=True, cache_dir=os.path.join(scratch, "cache"))
    cached_loader = DataLoader(cached, batch_size=32, num_workers=0, metrics=False)
    check(read_batches(cached_loader) == count * size, "G1 first (filling) epoch")
    copies = [path for batch in cached_loader for path in batch]
    check(all(path.startswith(os.path.join(scratch, "cache")) for path in copies), "G1 copies")
    in_place = DataLoader(UCVolumeDataset(folder), batch_size=32, num_workers=0, metrics=False)
    torch_only = torch.utils.data.DataLoader(sources, batch_size=32, num_workers=0, collate_fn=list)
    os.sync()  # the copies just written must not be flushed to disk while the reads are timed
    times = interleaved_medians(
        {
            "plain MiB/s": lambda: check(read_all(sources) == count * size, "G1 plain"),
            "plain copies MiB/s": lambda: check(read_all(copies) == count * size, "G1 plain copies"),
            "warm cached MiB/s": lambda: check(read_batches(cached_loader) == count * size, "G1 warm"),
            "in place MiB/s": lambda: check(read_batches(in_place) == count * size, "G1 in place"),
            "torch DataLoader MiB/s": lambda: check(read_batches(torch_only) == count * size, "G1 torch"),
        },
        repeats=3 * REPEATS,
    )
    cached.close()
    return {name: mib / seconds for name, seconds in times.items()}


def g2_cold_epoch(scratch: str) -> Dict[str, float]:
    folder = os.path.join(scratch, "g2")
    count = 3000
    make_files(folder, count, 16 * 1024)
    shim = SlowVolume()
    names = sorted(os.listdir(folder))
    single_count = 200
    target = os.path.join(scratch, "g2-single")
    os.makedirs(target)

    def one_thread() -> None:
        for name in names[:single_count]:
            shim.copy(os.path.join(folder, name), os.path.join(target, name))

    single = median_seconds(one_thread)
    os.sync()
    rates = []
    for repeat in range(REPEATS):
        dataset = UCVolumeDataset(
            folder, filesystem=shim, io_threads=8, cache_dir=os.path.join(scratch, f"cache-g2-{repeat}")
        )
        loader = DataLoader(dataset, batch_size=32, num_workers=2, metrics=False)
        started = time.perf_counter()
        seen = sum(len(batch) for batch in loader)
        rates.append(count / (time.perf_counter() - started))
        check(seen == count, "G2 epoch")
        dataset.close()
    return {"one thread files/s": single_count / single, "2 workers x 8 threads files/s": statistics.median(rates)}


def g3_per_item(scratch: str) -> Dict[str, float]:
    folder = os.path.join(scratch, "g3")
    count = 20_000
    make_files(folder, count, 0)
    dataset = UCVolumeDataset(folder, cache=True, cache_dir=os.path.join(scratch, "cache-g3"))
    check(len(list(dataset)) == count, "G3 fill")
    batched = DataLoader(dataset, batch_size=64, num_workers=0, metrics=False)
    per_item = DataLoader(dataset, batch_size=None, num_workers=0, metrics=False)
    paths = dataset.files
    torch_per_item = torch.utils.data.DataLoader(paths, batch_size=None, num_workers=0)
    os.sync()
    times = interleaved_medians(
        {
            "dataset items/s": lambda: check(sum(1 for _ in dataset) == count, "G3 direct"),
            "DataLoader(batch_size=64) items/s": lambda: check(sum(len(b) for b in batched) == count, "G3 loader"),
            "DataLoader(batch_size=None) items/s": lambda: check(sum(1 for _ in per_item) == count, "G3 unbatched"),
            "torch DataLoader(list, batch_size=None) items/s": lambda: check(
                sum(1 for _ in torch_per_item) == count, "G3 torch, no batches"
            ),
        }
    )
    dataset.close()
    return {name: count / seconds for name, seconds in times.items()}


def g4_start_up(scratch: str) -> Dict[str, float]:
    folder = os.path.join(scratch, "g4")
    count = 10_000
    make_files(folder, count, 1024)
    listing, first = [], []
    for _ in range(REPEATS):
        started = time.perf_counter()
        dataset = UCVolumeDataset(folder)
        listed = time.perf_counter()
        loader = DataLoader(dataset, batch_size=32, num_workers=2, metrics=False)
        batch = next(iter(loader))
        done = time.perf_counter()
        check(len(batch) == 32, "G4 first batch")
        listing.append(count / (listed - started))
        first.append(done - started)
        del loader
    return {"listing entries/s": statistics.median(listing), "first batch s": statistics.median(first)}


def main() -> None:
    for key, value in _machine.machine().items():
        print(f"{key:>12}: {value}")
    scratch = tempfile.mkdtemp(prefix="air-bench-data-")
    try:
        g1 = g1_warm_epoch(scratch)
        g2 = g2_cold_epoch(scratch)
        g3 = g3_per_item(scratch)
        g4 = g4_start_up(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows: List[tuple] = []
    ratio = g1["warm cached MiB/s"] / g1["plain MiB/s"]
    rows.append(
        (
            "G1 warm epoch vs plain reads",
            f"{g1['warm cached MiB/s']:.0f} vs {g1['plain MiB/s']:.0f} MiB/s "
            f"(in place {g1['in place MiB/s']:.0f}, torch {g1['torch DataLoader MiB/s']:.0f})",
            f"{ratio:.2f}x",
            ">= 0.8x",
            ratio >= 0.8,
        )
    )
    own = g1["warm cached MiB/s"] / g1["plain copies MiB/s"]
    rows.append(
        (
            "G1 same, vs plain reads of the copies",
            f"{g1['warm cached MiB/s']:.0f} vs {g1['plain copies MiB/s']:.0f} MiB/s",
            f"{own:.2f}x",
            "",
            True,
        )
    )
    fast = g2["2 workers x 8 threads files/s"]
    rows.append(
        (
            "G2 cold epoch, 5 ms/file volume",
            f"{fast:.0f} files/s (one thread: {g2['one thread files/s']:.0f})",
            f"{fast / g2['one thread files/s']:.1f}x",
            ">= 2100 files/s",
            fast >= 2100,
        )
    )
    rows.append(
        (
            "G3 per-item, warm, 1 process",
            f"{g3['dataset items/s']:.0f} direct, {g3['DataLoader(batch_size=64) items/s']:.0f} batched",
            "",
            ">= 20000/s",
            min(g3["dataset items/s"], g3["DataLoader(batch_size=64) items/s"]) >= 20_000,
        )
    )
    rows.append(
        (
            "G3 with batch_size=None (info)",
            f"{g3['DataLoader(batch_size=None) items/s']:.0f} ours, "
            f"{g3['torch DataLoader(list, batch_size=None) items/s']:.0f} torch over a list",
            "",
            "",
            True,
        )
    )
    rows.append(
        ("G4 first batch, 10,000 files", f"{g4['first batch s']:.3f} s", "", "<= 1 s", g4["first batch s"] <= 1.0)
    )
    rows.append(
        ("G4 listing", f"{g4['listing entries/s']:.0f} entries/s", "", ">= 50000/s", g4["listing entries/s"] >= 50_000)
    )
    print()
    print(f"{'':36} {'measured':52} {'ratio':>7}  {'target':>16}")
    for name, measured, shown_ratio, target, passed in rows:
        verdict = ("PASS" if passed else "MISS") if target else ""
        print(f"{name:36} {measured:52} {shown_ratio:>7}  {target:>16}  {verdict}")


if __name__ == "__main__":
    main()
