"""GPU leases: disjoint GPUs for concurrent calls, first come first served, freed when a holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import List

import pytest

from databricks.air._engine import gpu_leases
from databricks.air._engine.gpu_leases import Lease, LeaseCancelled, LeaseTimeout, take
from databricks.air.exceptions import RuntimeConfigurationError

EIGHT = [str(index) for index in range(8)]


def _take(table: Path, count: int, **kwargs) -> Lease:
    return take(count, {}, EIGHT, name=kwargs.pop("name", "trial"), folder=str(table), **kwargs)


def test_four_two_gpu_calls_get_disjoint_pairs_that_cover_the_node(tmp_path: Path) -> None:
    leases = [_take(tmp_path, 2) for _ in range(4)]
    assert [lease.devices for lease in leases] == [("0", "1"), ("2", "3"), ("4", "5"), ("6", "7")]
    assert leases[0].first and leases[0].environ() == {}  # the first GPUs: the caller's view is kept
    assert [lease.environ() for lease in leases[1:]] == [
        {"CUDA_VISIBLE_DEVICES": "2,3"},
        {"CUDA_VISIBLE_DEVICES": "4,5"},
        {"CUDA_VISIBLE_DEVICES": "6,7"},
    ]
    for lease in leases:
        lease.release()
    assert _take(tmp_path, 8).devices == tuple(EIGHT)


def test_a_fifth_call_waits_and_gets_the_pair_freed_first(tmp_path: Path) -> None:
    leases = [_take(tmp_path, 2, name=f"trial{i}") for i in range(4)]
    said: List[str] = []
    got: List[Lease] = []
    waiter = threading.Thread(target=lambda: got.append(_take(tmp_path, 2, on_wait=said.append)))
    waiter.start()
    time.sleep(0.3)
    assert not got and said == [f"waiting for 2 GPU(s): 8 of 8 leased by 4 call(s) (pid {os.getpid()})"]
    leases[2].release()
    waiter.join(5)
    assert got[0].devices == ("4", "5") and got[0].environ() == {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert got[0].waited >= 0.2
    assert os.listdir(tmp_path / "queue") == []  # the ticket went with the wait


def test_waiters_are_served_first_come_first_served(tmp_path: Path) -> None:
    held = _take(tmp_path, 8)
    order: List[str] = []

    def wait(name: str) -> None:
        lease = _take(tmp_path, 4, name=name)
        order.append(name)
        time.sleep(0.2)
        lease.release()

    first = threading.Thread(target=wait, args=("first",))
    first.start()
    time.sleep(0.2)
    second = threading.Thread(target=wait, args=("second",))
    second.start()
    time.sleep(0.2)
    held.release()  # 8 free: both could fit, but the first in line takes first
    first.join(5)
    second.join(5)
    assert order == ["first", "second"]


def test_a_second_process_waits_for_the_same_leases_and_a_killed_holder_frees_them(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from databricks.air._engine.gpu_leases import take
            take(8, {{}}, [str(i) for i in range(8)], name="holder", folder={str(tmp_path)!r})
            print("held", flush=True)
            time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        said: List[str] = []
        got: List[Lease] = []
        waiter = threading.Thread(target=lambda: got.append(_take(tmp_path, 1, on_wait=said.append)))
        waiter.start()
        time.sleep(0.3)
        assert not got and said == [f"waiting for 1 GPU(s): 8 of 8 leased by 1 call(s) (pid {holder.pid})"]
        os.kill(holder.pid, signal.SIGKILL)
        waiter.join(5)
        assert got and got[0].devices == ("0",)
    finally:
        holder.kill()
        holder.wait()


def test_a_dead_waiters_ticket_does_not_block_the_queue(tmp_path: Path) -> None:
    held = _take(tmp_path, 8)
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        from databricks.air._engine.gpu_leases import take
        take(8, {{}}, [str(i) for i in range(8)], name="waiter", folder={str(tmp_path)!r})
    """),
        ]
    )
    deadline = time.monotonic() + 30
    while not os.listdir(tmp_path / "queue") and time.monotonic() < deadline:
        time.sleep(0.05)
    waiter.kill()
    waiter.wait()
    held.release()
    assert _take(tmp_path, 2, deadline=time.monotonic() + 5).devices == ("0", "1")
    assert os.listdir(tmp_path / "queue") == []


def test_waiting_ends_at_the_deadline_or_on_cancel_holding_nothing(tmp_path: Path) -> None:
    held = _take(tmp_path, 7)
    with pytest.raises(LeaseTimeout, match=r"trial waited 0 s for 2 GPU\(s\) .* 7 of 8 leased by 1 call"):
        _take(tmp_path, 2, deadline=time.monotonic() + 0.2)
    cancelled = threading.Event()
    threading.Timer(0.2, cancelled.set).start()
    with pytest.raises(LeaseCancelled):
        _take(tmp_path, 2, cancelled=cancelled)
    assert _take(tmp_path, 1).devices == ("7",)  # nothing was kept by the waits
    assert os.listdir(tmp_path / "queue") == []
    held.release()


def test_the_devices_of_a_caller_follow_cuda_visible_devices_or_the_simulation() -> None:
    assert gpu_leases.node_devices({"CUDA_VISIBLE_DEVICES": "2, 5,GPU-abc"}, 3) == ["2", "5", "GPU-abc"]
    assert gpu_leases.node_devices({}, 2) == ["0", "1"]
    simulated = {"DATABRICKS_AIR_SIMULATE_GPUS": "8", "CUDA_VISIBLE_DEVICES": ""}
    assert gpu_leases.simulated_count(simulated) == 8 and gpu_leases.node_devices(simulated, 8) == EIGHT
    assert gpu_leases.simulated_count({"DATABRICKS_AIR_SIMULATE_GPUS": "0"}) is None
    for bad in ("two", "-1", "1e9"):
        with pytest.raises(RuntimeConfigurationError, match="DATABRICKS_AIR_SIMULATE_GPUS must be a whole number"):
            gpu_leases.simulated_count({"DATABRICKS_AIR_SIMULATE_GPUS": bad})


def test_a_newcomer_does_not_take_a_gpu_freed_while_others_wait(tmp_path: Path) -> None:
    first_half, second_half = _take(tmp_path, 4), _take(tmp_path, 4)
    got: List[Lease] = []
    waiter = threading.Thread(target=lambda: got.append(_take(tmp_path, 8, name="waiter")))
    waiter.start()
    time.sleep(0.2)
    first_half.release()  # 4 free, but the waiter came first and needs all 8
    with pytest.raises(LeaseTimeout):
        _take(tmp_path, 1, deadline=time.monotonic() + 0.2)
    second_half.release()
    waiter.join(5)
    assert got[0].devices == tuple(EIGHT)
