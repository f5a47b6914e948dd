"""When a call hangs, it says which rank is stuck where: real gloo ranks through ``.distributed()``.

Every scenario waits until the ranks are in position (each rank notes it in a file) before the call is stopped,
so the report is about the hang, not about ranks still starting; timeouts are short and the rank server is warm.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, List

import psutil
import pytest

from databricks.air import distributed
from databricks.air.exceptions import DistributedExecutionError, LocalExecutionTimeoutError


def _in_position(marks: str) -> None:
    Path(marks, f"rank{os.environ['RANK']}").write_text(str(os.getpid()))


def sleeps_before_second_all_reduce(marks: str, seconds: float = 120) -> None:
    """Rank 1 sleeps in user code after the first all-reduce; rank 0 waits in the second."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    _in_position(marks)
    if dist.get_rank() == 1:
        time.sleep(seconds)
    dist.all_reduce(tensor)
    dist.destroy_process_group()


def spins_holding_the_gil(marks: str) -> None:
    """Rank 1 backtracks in the regular expression engine (C code, GIL held) forever; rank 0 waits."""
    import re

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    _in_position(marks)
    if dist.get_rank() == 1:
        while True:
            re.match(r"(a+)+$", "a" * 30 + "b")
    dist.all_reduce(tensor)


def never_joins(marks: str) -> None:
    """Rank 0 waits in init_process_group; rank 1 never calls it."""
    import torch.distributed as dist

    _in_position(marks)
    if os.environ["RANK"] == "1":
        time.sleep(120)
    dist.init_process_group("gloo")


def mismatched(marks: str) -> None:
    """Rank 0 all-reduces where rank 1 broadcasts."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    _in_position(marks)
    if dist.get_rank() == 0:
        dist.all_reduce(tensor)
    else:
        dist.broadcast(tensor, 0)
    time.sleep(120)


def barrier_against_all_reduce(marks: str) -> None:
    """Rank 0 all-reduces where rank 1 waits in a barrier: gloo waits in both, for ever."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    _in_position(marks)
    if dist.get_rank() == 0:
        dist.all_reduce(tensor)
    else:
        dist.barrier()


def raises_while_the_other_waits(marks: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    _in_position(marks)
    if dist.get_rank() == 1:
        time.sleep(0.5)  # rank 0 is in the second all-reduce by then
        raise ValueError("rank 1 gives up")
    dist.all_reduce(tensor)


def writes_a_long_checkpoint(marks: str, seconds: float) -> str:
    """Both ranks spend a while outside any collective (a checkpoint write), then meet again."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(1)
    dist.all_reduce(tensor)
    _in_position(marks)
    time.sleep(seconds)
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    return "done"


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def _private_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:  # a long path, on purpose
    """Calls make their private folders here, so a test can see that none is left."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("DATABRICKS_AIR_SNAPSHOT_SECONDS", "3")
    yield folder
    assert [p.name for p in folder.iterdir() if p.name.startswith("databricks-air-call-")] == []


@pytest.fixture(autouse=True)
def _warm() -> None:
    """A warm rank server: the ranks reach their positions in a fraction of the short timeouts."""
    distributed(accelerator_type="CPU", num_accelerators=2)(lambda: None).distributed()


def _ranks_gone(marks: Path) -> bool:
    pids = [int(p.read_text()) for p in marks.iterdir()]
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def _when(condition: Callable[[], bool], then: Callable[[], None], limit: float = 60) -> None:
    def watch() -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if condition():
                time.sleep(0.5)  # into the collective, or the sleep
                then()
                return
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()


def _both_in_position(marks: Path) -> Callable[[], bool]:
    return lambda: len(list(marks.iterdir())) == 2


def _interrupt() -> None:
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def _line(function: Callable[..., object], text: str) -> int:
    """The line number, in this file, of the line of ``function`` holding ``text``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(index for index, line in enumerate(lines) if text in line)


SLEEP = _line(sleeps_before_second_all_reduce, "time.sleep(seconds)")
SECOND_ALL_REDUCE = SLEEP + 1


def _snapshot_folder(error_text: str) -> Path:
    line = next(line for line in error_text.splitlines() if line.startswith("Every rank's stacks: "))
    return Path(line.split(": ", 1)[1])


@pytest.mark.slow
def test_the_timeout_names_the_rank_behind_and_where_it_is(marks: Path) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=6)(sleeps_before_second_all_reduce)
    with pytest.raises(LocalExecutionTimeoutError) as caught:
        call.distributed(str(marks))
    message = str(caught.value)
    table = message.split("Where the ranks were when the time was up:\n", 1)[1]
    rank0, rank1 = table.splitlines()[:2]
    assert "rank 0: waiting in all_reduce #2 of the default group" in rank0
    assert rank0.rstrip().endswith(f"test_hang.py:{SECOND_ALL_REDUCE}: dist.all_reduce(tensor)")
    assert "rank 1: running its own code (1 collective completed)" in rank1
    assert rank1.rstrip().endswith(f"test_hang.py:{SLEEP}: time.sleep(seconds)")
    assert (
        "Rank 1 is behind: it completed 1 collective of the default group and is in time.sleep at "
        f"tests/engine/test_hang.py:{SLEEP}, while rank 0 waits in all_reduce #2 of the default group"
    ) in message
    folder = _snapshot_folder(message)
    assert sorted(p.name for p in folder.iterdir()) == ["rank_0.txt", "rank_1.txt", "summary.txt", "suspects.json"]
    assert "time.sleep(seconds)" in (folder / "rank_1.txt").read_text()
    assert json.loads((folder / "suspects.json").read_text())["suspect_ranks"] == [1]
    assert _ranks_gone(marks)


def test_an_interrupt_prints_the_report_before_it_propagates(marks: Path, capfd: pytest.CaptureFixture[str]) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(sleeps_before_second_all_reduce)
    _when(_both_in_position(marks), _interrupt)
    with pytest.raises(KeyboardInterrupt):
        call.distributed(str(marks))
    err = capfd.readouterr().err
    assert "databricks.air: interrupted. Where the ranks were:" in err
    assert "Rank 1 is behind" in err and f"time.sleep at tests/engine/test_hang.py:{SLEEP}" in err
    assert _ranks_gone(marks)


@pytest.mark.slow
def test_a_rank_holding_the_gil_is_placed_by_its_stack(marks: Path) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(spins_holding_the_gil)
    _when(_both_in_position(marks), _interrupt)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        call.distributed(str(marks))
    assert time.monotonic() - started < 60
    folder = next(Path(os.environ["DATABRICKS_AIR_LOG_DIR"]).glob("*/snapshot"))
    summary = (folder / "summary.txt").read_text()
    assert "rank 1: running, not answering its probe (holding the GIL?)" in summary
    assert "is in re.match at tests/engine/test_hang.py" in summary
    assert "probe: no answer within" in summary  # the source that failed, with its reason
    assert _ranks_gone(marks)


def test_a_rank_that_never_calls_init_process_group(marks: Path) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(never_joins)
    _when(_both_in_position(marks), _interrupt)
    with pytest.raises(KeyboardInterrupt):
        call.distributed(str(marks))
    summary = (next(Path(os.environ["DATABRICKS_AIR_LOG_DIR"]).glob("*/snapshot")) / "summary.txt").read_text()
    assert "rank 0: waiting in init_process_group (for the other ranks to join)" in summary
    assert "Rank 1 never joined the process group: rank 1 is in time.sleep at tests/engine/test_hang.py" in summary


def test_mismatched_collectives_are_named(marks: Path) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(mismatched)
    _when(_both_in_position(marks), _interrupt)
    # gloo does not check that peers run the same collective: the mismatched messages may crash a rank (SIGSEGV)
    # while the launcher looks, which then is the call's error. The report of where they were is written either way.
    with pytest.raises((KeyboardInterrupt, DistributedExecutionError)):
        call.distributed(str(marks))
    summary = (next(Path(os.environ["DATABRICKS_AIR_LOG_DIR"]).glob("*/snapshot")) / "summary.txt").read_text()
    assert (
        "The ranks diverged at collective #2 of the default group: rank 0 in all_reduce [[4]], rank 1 in "
        "broadcast [[4]]"
    ) in summary


def test_the_rank_that_raised_is_the_root_cause_and_the_peer_a_consequence(marks: Path) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(raises_while_the_other_waits)
    with pytest.raises(ValueError) as caught:
        call.distributed(str(marks))
    message = str(caught.value)
    assert message.startswith("raises_while_the_other_waits: rank 1 of 2 raised ValueError: rank 1 gives up")
    assert caught.value.rank == 1
    if 0 in caught.value.failures:  # rank 0 lost its peer before it was stopped: its error is a consequence
        assert "rank 0, line" in message and "a peer closed its connection. A consequence" in message
    else:  # rank 0 was stopped before it recorded an error: still waiting, or caught on its way out of the collective
        # Caught on its way out, rank 0 is past all-reduce #2 (the flight recorder marks a failed one completed),
        # in that line or already in the error's handling.
        row = message.split("When rank 1 failed, the other ranks were:\n", 1)[1].splitlines()[0]
        assert row.startswith(
            ("  rank 0: waiting in all_reduce #2", "  rank 0: running its own code (2 collectives completed)")
        ), row
        assert "stopped by the launcher" in message.split("Ranks:\n", 1)[1].splitlines()[0], message
    assert _ranks_gone(marks)


@pytest.mark.slow
def test_a_stall_warns_once_and_the_call_goes_on(
    marks: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_STALL_SECONDS", "1.5")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(sleeps_before_second_all_reduce)
    assert call.distributed(str(marks), seconds=4) == [None, None]
    err = capfd.readouterr().err
    assert err.count("looks stalled") == 1
    assert (
        "looks stalled: rank 0 has waited" in err
        and "in all_reduce #2 of the default group, which rank 1 has not reached" in err
    )
    assert "Rank 1 is behind" in err
    assert (Path(call.last_log_dir) / "stall_1" / "summary.txt").exists()


@pytest.mark.slow
def test_ranks_that_diverged_are_said_so_while_the_call_runs(
    marks: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_STALL_SECONDS", "10")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(barrier_against_all_reduce)
    said: List[float] = []

    def warned() -> bool:
        if len(list(marks.iterdir())) < 2 or not (Path(call.last_log_dir or "/") / "stall_1" / "summary.txt").exists():
            return False
        said.append(time.monotonic())
        return True

    in_position: List[float] = []  # _when acts half a second after the condition holds
    _when(_both_in_position(marks), lambda: in_position.append(time.monotonic() - 0.5), limit=60)
    _when(warned, _interrupt, limit=60)
    with pytest.raises(KeyboardInterrupt):
        call.distributed(str(marks))
    err = capfd.readouterr().err
    assert said and in_position and said[0] - in_position[0] < 20
    assert (
        "looks stalled: ranks 0 and 1 have waited 1" in err
        and "s at collective #2 of the default group in "
        "different collectives: rank 0 in all_reduce [[4]], rank 1 in barrier []. They diverged"
        in err
    ), err
    assert "The ranks diverged at collective #2 of the default group" in err
    assert _ranks_gone(marks)


@pytest.mark.slow
def test_ranks_busy_outside_collectives_are_no_stall(
    marks: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_STALL_SECONDS", "1")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(writes_a_long_checkpoint)
    assert call.distributed(str(marks), 4) == ["done", "done"]
    assert "stalled" not in capfd.readouterr().err


def test_the_flight_recorder_is_on_and_dumps_into_the_log_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    def settings() -> List[str]:
        return [
            os.environ.get(name, "")
            for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE")
        ]

    call = distributed(accelerator_type="CPU", num_accelerators=2)(settings)
    buffer, dump, prefix = call.distributed()[0]
    assert (buffer, dump) == ("2000", "1") and prefix == os.path.join(call.last_log_dir, "flight_recorder_rank_")
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")  # the user's choice, under torch's older name
    assert call.distributed()[0][0] == ""


@pytest.mark.slow
def test_no_snapshot_when_turned_off(marks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_SNAPSHOT_SECONDS", "0")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=5)(sleeps_before_second_all_reduce)
    with pytest.raises(LocalExecutionTimeoutError) as caught:
        call.distributed(str(marks))
    assert "Where the ranks were" not in str(caught.value)


@pytest.mark.slow
def test_a_tracked_call_keeps_the_snapshot_and_names_the_suspect(
    marks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    for name in ("MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    from mlflow.tracking import fluent

    monkeypatch.setattr(fluent, "_active_experiment_id", None)  # an earlier test's experiment is of another store
    mlflow.set_tracking_uri(uri)
    request.addfinalizer(lambda: mlflow.set_tracking_uri(None))
    monkeypatch.setenv("DATABRICKS_AIR_SYSTEM_METRICS", "0")
    monkeypatch.setenv("DATABRICKS_AIR_STALL_SECONDS", "1.5")
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)(sleeps_before_second_all_reduce)
    client = mlflow.MlflowClient(uri)

    def stall_kept() -> bool:  # the stall's report is in the run (an interrupt during its upload would lose it)
        if not (len(list(marks.iterdir())) == 2 and (Path(call.last_log_dir or "/") / "stall_1").exists()):
            return False
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        return bool(runs) and bool(client.list_artifacts(runs[0].info.run_id, "snapshot/stall_1"))

    _when(stall_kept, _interrupt)
    with pytest.raises(KeyboardInterrupt):
        call.distributed(str(marks))
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "KILLED"
    assert run.data.tags["databricks.air.suspect_ranks"] == "1"
    kept = {a.path for a in client.list_artifacts(run.info.run_id, "snapshot")}
    assert {"snapshot/summary.txt", "snapshot/rank_0.txt", "snapshot/rank_1.txt", "snapshot/stall_1"} <= kept
    assert {a.path for a in client.list_artifacts(run.info.run_id, "snapshot/stall_1")} >= {
        "snapshot/stall_1/summary.txt"
    }


def probe_threads() -> List[str]:
    import threading

    return [thread.name for thread in threading.enumerate() if thread.name == "databricks.air probe"]


def test_with_the_snapshot_and_both_watches_off_no_rank_runs_a_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    call = distributed(accelerator_type="CPU", num_accelerators=2)(probe_threads)
    assert call.distributed() == [["databricks.air probe"]] * 2
    monkeypatch.setenv("DATABRICKS_AIR_SNAPSHOT_SECONDS", "0")
    monkeypatch.setenv("DATABRICKS_AIR_STALL_SECONDS", "0")
    assert call.distributed() == [["databricks.air probe"]] * 2  # the straggler watch asks it too
    monkeypatch.setenv("DATABRICKS_AIR_STRAGGLER_SECONDS", "0")
    assert call.distributed() == [[], []]
