"""What a rank server imports after it started: MLflow (with tracking on) and what its ranks turned out to use.

* DDP's constructor imports ``torch._dynamo`` (a second of CPU time in every rank); once a call's ranks have done
  so, the server imports it before it forks the next call's ranks. A server whose ranks never use it never imports
  it, and the variables those modules read when imported are part of the server's start-up fingerprint.
* Those imports wait for idle time or the next call: a caller that goes right after its call leaves a server that
  never spent its CPU time on them.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Dict, Tuple

import pytest

from databricks.air import distributed
from databricks.air._engine.learned_imports import WORTH_PRELOADING, LearnedImports
from databricks.air._engine.rank_server_handle import startup_fingerprint
from mlflow_fixtures import store  # noqa: F401 - fixture
from process_helpers import wait_until

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=180)


def server_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start-up variable no other test sets: the calls of this test get a fresh server of their own."""
    monkeypatch.setenv("TORCHINDUCTOR_AIR_TEST_SERVER", uuid.uuid4().hex)


def builds_ddp() -> Tuple[bool, int]:
    """Whether the rank started with torch._dynamo loaded, and its server's pid; then DDP imports it."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    started_with_it = "torch._dynamo" in sys.modules
    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(2, 2))
    model(torch.ones(1, 2)).sum().backward()
    model = None  # the model goes before its process group
    dist.destroy_process_group()
    return started_with_it, os.getppid()


def loaded_at_start() -> Tuple[Dict[str, bool], int]:
    return {name: name in sys.modules for name in WORTH_PRELOADING}, os.getppid()


def test_after_a_call_whose_ranks_built_ddp_the_next_calls_ranks_start_with_dynamo_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_of_its_own(monkeypatch)
    first = cpu2(builds_ddp).distributed()
    second = cpu2(builds_ddp).distributed()  # at once: no idle time, the server imports before it forks
    assert [started for started, _ in first] == [False, False]
    assert [started for started, _ in second] == [True, True]
    assert len({server for _, server in first + second}) == 1  # the same server learned it


def test_a_server_whose_ranks_never_use_them_never_imports_them(monkeypatch: pytest.MonkeyPatch) -> None:
    server_of_its_own(monkeypatch)
    first = cpu2(loaded_at_start).distributed()
    time.sleep(1.0)  # longer than the server's idle wait: it would have imported anything it had learned
    second = cpu2(loaded_at_start).distributed()
    assert {server for _, server in first + second} == {first[0][1]}
    for loaded, _ in first + second:
        assert not any(loaded.values()), loaded


@pytest.mark.parametrize(
    "variable", ["TORCHINDUCTOR_MAX_AUTOTUNE", "TORCHDYNAMO_VERBOSE", "TORCH_LOGS", "INDUCTOR_POST_FUSION_SVG"]
)
def test_a_variable_those_modules_read_at_import_is_part_of_the_servers_fingerprint(variable: str) -> None:
    environ = {name: value for name, value in os.environ.items() if name != variable}
    assert startup_fingerprint({**environ, variable: "1"}) != startup_fingerprint(environ)


def test_the_server_takes_only_the_modules_it_may_preload_from_the_ranks_reports() -> None:
    learned = LearnedImports()
    try:
        absent = [name for name in WORTH_PRELOADING if name not in sys.modules]
        reports = ["os,json_not_a_module\n", ",".join(WORTH_PRELOADING) + "\n", "subprocess\n", ""]
        for line in reports:
            os.write(learned.write_fd, line.encode())
        learned.read()
        assert learned.pending == set(absent)  # not os or subprocess: what a rank writes is checked, not trusted
        learned.read()  # nothing more on the pipe: returns at once
        assert learned.pending == set(absent)
    finally:
        os.close(learned.read_fd)
        os.close(learned.write_fd)


def server_pid() -> int:
    return os.getppid()


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


@pytest.mark.slow
def test_mlflow_comes_into_the_server_once_it_is_idle_not_as_soon_as_the_first_call_ends(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script that makes one tracked call and exits closes its server right after the call: an import begun as
    # the ranks ended would have been seconds of CPU time for nothing.
    server_of_its_own(monkeypatch)
    (pid, _) = cpu2(server_pid).distributed()
    began, before = time.monotonic(), cpu_seconds(pid)
    time.sleep(0.25)
    spent, waited = cpu_seconds(pid) - before, time.monotonic() - began
    if waited < 0.45:  # within the half second of idle time the server waits first (else this machine stalled us)
        assert spent < 0.15, f"the server spent {spent:.2f} s of CPU time in the {waited:.2f} s after the call"
    # Then, idle, it imports MLflow (a second or more of CPU time): the next call's ranks start with it loaded.
    assert wait_until(lambda: cpu_seconds(pid) - before > 0.5, 60, interval=0.1)
