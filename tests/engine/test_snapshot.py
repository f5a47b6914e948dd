"""Snapshots of real processes: stacks from faulthandler and the probe, collectives from the flight recorder."""

from __future__ import annotations

import multiprocessing
import os
import re
import socket
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from databricks.air._engine import rank_probe, snapshot


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_body(folder: str, rank: int, port: int, mode: str) -> None:
    """Two gloo ranks do 3 all-reduces; then rank 1 sleeps or spins in C (GIL held) and rank 0 waits in the 4th."""
    import torch
    import torch.distributed as dist

    rank_probe.install(os.path.join(folder, f"stacks_{rank}.txt"), os.path.join(folder, f"probe_{rank}.sock"))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    dist.init_process_group("gloo")
    tensor = torch.ones(3)
    for _ in range(3):
        dist.all_reduce(tensor)
    (Path(folder) / f"ready_{rank}").touch()
    if rank == 1:
        if mode == "sleep":
            time.sleep(120)
        else:
            while True:
                re.match(r"(a+)+$", "a" * 32 + "b")  # catastrophic backtracking: C code, GIL held
    dist.all_reduce(tensor)


@pytest.fixture
def hung_ranks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[List[snapshot.ProbeTarget]]:
    context = multiprocessing.get_context("spawn")
    port = _port()
    processes = [context.Process(target=_rank_body, args=(str(tmp_path), r, port, request.param)) for r in range(2)]
    for process in processes:
        process.start()
    try:
        limit = time.monotonic() + 120
        while not all((tmp_path / f"ready_{r}").exists() for r in range(2)):
            assert time.monotonic() < limit, "the ranks did not get through their first collectives"
            time.sleep(0.05)
        time.sleep(0.3)  # rank 0 into all-reduce #4, rank 1 into its sleep or loop
        yield [
            snapshot.ProbeTarget(r, p.pid, str(tmp_path / f"stacks_{r}.txt"), str(tmp_path / f"probe_{r}.sock"))
            for r, p in enumerate(processes)
        ]
    finally:
        for process in processes:
            process.kill()
            process.join()


def _innermost(taken: snapshot.RankSnapshot, file_part: str) -> snapshot.Frame:
    thread = taken.main_thread
    assert thread is not None, taken.sources
    return [frame for frame in thread.frames if file_part in frame.file][-1]


@pytest.mark.slow
@pytest.mark.parametrize("hung_ranks", ["sleep"], indirect=True)
def test_a_rank_waiting_in_a_collective_and_a_sleeping_one(hung_ranks: List[snapshot.ProbeTarget]) -> None:
    limit = time.monotonic() + 30
    while True:  # on a loaded machine the ranks may take longer than the fixture's pause to get into position
        taken = snapshot.take(hung_ranks, budget=5.0)
        waiting, sleeping = taken[0], taken[1]
        in_position = (
            bool(waiting.groups)
            and waiting.groups[0].enqueued == 4
            and any("time.sleep(120)" in frame.source for thread in sleeping.threads for frame in thread.frames)
        )
        if in_position or time.monotonic() > limit:
            break
        time.sleep(0.2)
    assert waiting.sources == {"probe": "ok"}  # its stacks came from the probe: no signal was needed
    (group,) = waiting.groups
    assert (group.label, group.enqueued, group.completed) == ("the default group", 4, 3)
    assert group.pending is not None and (group.pending.op, group.pending.seq) == ("all_reduce", 4)
    assert group.pending.sizes == [[3]]
    assert "dist.all_reduce(tensor)" in _innermost(waiting, "test_snapshot.py").source
    (group,) = sleeping.groups
    assert group.enqueued == 3  # its third all-reduce may be marked completed a moment late
    assert _innermost(sleeping, "test_snapshot.py").source == "time.sleep(120)"
    assert "not completed: all_reduce #4" in waiting.text and "time.sleep(120)" in sleeping.text
    assert all(thread.name != "databricks.air probe" for thread in sleeping.threads)


@pytest.mark.slow
@pytest.mark.parametrize("hung_ranks", ["spin"], indirect=True)
def test_a_rank_holding_the_gil_still_gives_its_stack_within_the_budget(hung_ranks: List[snapshot.ProbeTarget]) -> None:
    started = time.monotonic()
    taken = snapshot.take(hung_ranks, budget=2.0)
    assert time.monotonic() - started < 4.0  # the budget bounds it, though rank 1 never answers its probe
    spinning = taken[1]
    assert spinning.groups is None
    assert spinning.sources["probe"].startswith("no answer within")
    assert spinning.sources["stacks"] == "ok"
    frame = _innermost(spinning, "test_snapshot.py")
    assert "re.match" in frame.source  # faulthandler names the line; the source comes from linecache
    assert "faulthandler's dump:" in spinning.text
    assert taken[0].sources["probe"] == "ok"  # the other rank is not held up


def test_a_rank_that_has_exited_is_reported_as_such(tmp_path: Path) -> None:
    process = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    process.start()
    process.join()
    target = snapshot.ProbeTarget(0, process.pid, str(tmp_path / "stacks_0.txt"), str(tmp_path / "probe_0.sock"))
    taken = snapshot.take([target], budget=1.0)[0]
    assert taken.sources["stacks"] == "the rank had already exited"
    assert taken.sources["probe"].startswith("not listening")
    assert taken.threads == [] and taken.groups is None


def test_a_faulthandler_dump_is_parsed_into_threads() -> None:
    dump = (
        "Thread 0x00007fdffcfde6c0 (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 982 in run\n'
        '  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap\n'
        "\n"
        "Current thread 0x00007fdffde21b80 (most recent call first):\n"
        '  File "/usr/lib/python3.11/re/__init__.py", line 166 in match\n'
        '  File "/home/me/project/train.py", line 9 in <module>\n'
    )
    threads = snapshot.parse_faulthandler(dump, main_ident=0x7FDFFDE21B80)
    assert [t.main for t in threads] == [True, False]
    assert [(f.file, f.line, f.function) for f in threads[0].frames] == [
        ("/home/me/project/train.py", 9, "<module>"),
        ("/usr/lib/python3.11/re/__init__.py", 166, "match"),
    ]


def _churns_threads(folder: str) -> None:
    """A rank whose threads come and go (as a thread pool's do), with the probe installed."""
    import threading

    rank_probe.install(os.path.join(folder, "stacks_0.txt"), os.path.join(folder, "probe_0.sock"))

    def churn() -> None:
        while True:
            threads = [threading.Thread(target=lambda: None) for _ in range(20)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

    for _ in range(2):
        threading.Thread(target=churn, daemon=True).start()
    (Path(folder) / "ready_0").touch()
    time.sleep(120)


def test_snapshots_of_a_rank_whose_threads_come_and_go_never_crash_it(tmp_path: Path) -> None:
    # faulthandler's all-threads dump, on a signal, killed such a process with SIGSEGV within 7 to 20 signals.
    process = multiprocessing.get_context("spawn").Process(target=_churns_threads, args=(str(tmp_path),))
    process.start()
    try:
        limit = time.monotonic() + 60
        while not (tmp_path / "ready_0").exists():
            assert time.monotonic() < limit and process.is_alive(), "the rank did not start"
            time.sleep(0.05)
        target = snapshot.ProbeTarget(0, process.pid, str(tmp_path / "stacks_0.txt"), str(tmp_path / "probe_0.sock"))
        for _ in range(60):
            taken = snapshot.take([target], budget=5.0)[0]
            assert process.is_alive(), f"the snapshot crashed the rank (exit code {process.exitcode})"
            assert taken.sources["probe"] == "ok", taken.sources
            assert any(thread.main for thread in taken.threads)
    finally:
        process.kill()
        process.join()
