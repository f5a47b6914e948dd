"""Faults around a run, with real processes: a full disk under the registry, damaged ``state.json``/``spec.json``
files, a keeper killed with SIGKILL (issue 30).

The full-disk tests put the registry on a 2 MB tmpfs, which needs root (CI runs as root); they are skipped with the
reason elsewhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from process_helpers import processes_with_marker, wait_until
from workload_support import air, envelope, state, submit, wait_for, write_workload

# Prints without end (a megabyte in a few milliseconds): only a stopped command ends it.
FLOOD = """\
python -c '
import sys
line = "x" * 1000 + "\\n"
while True:
    sys.stdout.write(line)
'
"""

# A child, a grandchild, and a child in a session of its own (as torchrun starts its workers), all asleep.
TREE = """\
setsid sleep 300 &
python -c 'import subprocess, time; subprocess.Popen(["sleep", "300"]); time.sleep(300)' &
echo started
wait
"""


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The registry (``DATABRICKS_AIR_HOME``) on a tmpfs of 2 MB, unmounted afterwards; no MLflow tracking."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here: {mounted.stderr.strip()}")
    monkeypatch.setenv("DATABRICKS_AIR_HOME", str(disk / "air"))
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "0")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # something still holds it: detach


def _fill(disk: Path) -> Path:
    """Take every byte left on the disk; returns the filler file."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as stream:
        try:
            while stream.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    return filler


@pytest.mark.slow
def test_output_that_fills_the_disk_fails_the_attempt_stops_the_command_and_keeps_the_run(
    tmp_path: Path, small_disk: Path
) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command=FLOOD, env_variables={"AIR_TEST_MARKER": marker}, max_retries=2)
    watched = air("run", "-f", str(path), "--watch", timeout=60)
    assert watched.returncode == 1, watched.stderr[-2000:]
    assert "no space left on device while writing node 0's log" in watched.stderr
    assert processes_with_marker(marker) == []  # the command was stopped, not left blocked on a full pipe

    data = envelope(air("get", "1", "-o", "json"))["data"]
    assert data["status"] == "FAILED"
    assert [attempt["status"] for attempt in data["attempts"]] == ["FAILED"]  # not retried: the disk is still full
    reason = data["attempts"][0]["reason"]
    assert reason.startswith("no space left on device while writing node 0's log (") and "was stopped" in reason
    listed = envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"]
    assert [(item["run_id"], item["status"]) for item in listed] == [(1, "FAILED")]

    # With no byte left at all: the readers work, and a new run fails in one line without leaving a folder.
    _fill(small_disk)
    got = air("get", "1")
    assert got.returncode == 0 and "internal error" not in got.stderr, got.stderr
    canceled = air("cancel", "1")
    assert "internal error" not in canceled.stderr + canceled.stdout
    assert "has already ended (FAILED)" in canceled.stdout
    again = air("run", "-f", str(path))
    assert again.returncode == 1
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no space left on device in "), again.stderr
    runs = small_disk / "air" / "runs"
    assert sorted(name for name in os.listdir(runs) if not name.startswith(".")) == ["1", "keys"]
    assert len(os.listdir(runs / "keys")) == 1


def test_a_state_that_cannot_be_written_leaves_the_last_good_one_and_readers_show_the_truth(
    tmp_path: Path, small_disk: Path
) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command="echo started\nsleep 300", env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    running = wait_for(run_id, lambda s: s.status == "RUNNING")
    folder = small_disk / "air" / "runs" / str(run_id)
    log = folder / "attempts" / "0" / "node_0.log"
    assert wait_until(lambda: log.exists() and b"started" in log.read_bytes(), timeout=30)
    (folder / ".reserve").unlink()  # no room kept: not even the run's end can be written
    filler = _fill(small_disk)
    supervisor = running.owner["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    assert wait_until(lambda: processes_with_marker(marker) == [], timeout=15), processes_with_marker(marker)

    got = envelope(air("get", str(run_id), "-o", "json"))["data"]
    assert got["status"] == "FAILED" and f"the supervisor (pid {supervisor}) ended unexpectedly" in got["message"]
    assert "is full" in got["message"]
    saved = json.loads((folder / "state.json").read_text())  # the last good state, whole
    assert saved["status"] == "RUNNING"
    listed = envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"]
    assert [(item["run_id"], item["status"]) for item in listed] == [(run_id, "FAILED")]

    filler.unlink()  # room again: the next reader saves what it sees
    assert state(run_id).status == "FAILED"
    assert json.loads((folder / "state.json").read_text())["status"] == "FAILED"


def test_cancel_on_a_full_disk_still_records_the_run_canceled(tmp_path: Path, small_disk: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command="echo started\nsleep 300", env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    wait_for(run_id, lambda s: s.status == "RUNNING")
    log = small_disk / "air" / "runs" / str(run_id) / "attempts" / "0" / "node_0.log"
    assert wait_until(lambda: log.exists() and b"started" in log.read_bytes(), timeout=30)  # nothing more to write
    _fill(small_disk)
    done = air("cancel", str(run_id))
    assert done.returncode == 0 and f"Run {run_id}: canceled" in done.stdout, done.stderr + done.stdout
    assert processes_with_marker(marker) == []
    saved = json.loads((small_disk / "air" / "runs" / str(run_id) / "state.json").read_text())
    assert saved["status"] == "CANCELED"  # written with the room the run kept for it


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["[]", "{}", "truncated", "missing", "empty", "spec"])
def test_a_damaged_run_is_listed_as_damaged_and_the_others_as_usual(tmp_path: Path, damage: str) -> None:
    path = write_workload(tmp_path, command="echo hello")
    for _ in range(2):
        assert air("run", "-f", str(path), "--watch").returncode == 0
    folder = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / "1"
    broken = folder / ("spec.json" if damage == "spec" else "state.json")
    text = broken.read_text()
    if damage == "missing":
        broken.unlink()
    elif damage == "truncated":
        broken.write_text(text[: len(text) // 2])
    elif damage == "empty":
        broken.write_text("")
    elif damage == "spec":
        broken.write_text("[]")
    else:
        broken.write_text(damage)
    problem = {
        "[]": "state.json is not a run's state: it holds a JSON list, not an object",
        "{}": "state.json is not a run's state: it lacks run_id, status, submitted_at",
        "truncated": "state.json is not valid JSON, cut short or overwritten (",
        "missing": "state.json is missing",
        "empty": "state.json is empty",
        "spec": "spec.json is not a run's spec: it holds a JSON list, not an object",
    }[damage]

    for args in (["list"], ["list", "--all-status"]):
        listed = air(*args)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()]
        assert ["1"] in [row[:1] for row in rows if row and row[2:3] == ["DAMAGED"]], listed.stdout
        assert f"run 1 is damaged: {problem}" in listed.stdout and str(broken) in listed.stdout
    items = envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"]
    assert [(item["run_id"], item["status"]) for item in items] == [(2, "SUCCESS"), (1, "DAMAGED")]
    assert items[1]["damage"].startswith(problem) and items[1]["damaged_file"] == str(broken)

    got = air("get", "1")
    assert got.returncode == 1
    assert got.stderr.startswith(f"Error: run 1 is damaged: {problem}") and str(broken) in got.stderr, got.stderr
    assert "internal error" not in got.stderr
    assert air("get", "2").returncode == 0
    reserve = folder.parent / "2" / ".reserve"  # the room a run keeps while it runs is given back at its end
    assert wait_until(lambda: not reserve.exists(), timeout=10)
    canceled = air("cancel", "--all", "-y")
    assert canceled.returncode == 0 and "No active runs" in canceled.stdout  # a damaged run is not known to run


def test_a_killed_keeper_takes_every_process_of_its_command_along(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command=TREE, env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    running = wait_for(run_id, lambda s: s.status == "RUNNING" and "attempt" in s.owner)
    # bash, the setsid sleep, python and its sleep (and the keeper, which has the command's environment too).
    assert wait_until(lambda: len(processes_with_marker(marker)) >= 5, timeout=30), processes_with_marker(marker)
    keeper = running.owner["attempt"]["keeper_pid"]
    assert "keeper" in " ".join(psutil.Process(keeper).cmdline())
    os.kill(keeper, signal.SIGKILL)
    assert wait_until(lambda: processes_with_marker(marker) == [], timeout=5), [
        (p.pid, p.cmdline()) for p in processes_with_marker(marker)
    ]

    final = wait_for(run_id, lambda s: s.terminal, timeout=15)
    assert final.status == "FAILED"
    assert (
        final.message == f"node 0's keeper (pid {keeper}) was killed by SIGKILL; every process of the command "
        "was stopped with it"
    )
    assert final.attempt_list[0].exit_code == 137


def test_a_log_that_cannot_be_written_says_why_and_takes_what_comes_without_raising(tmp_path: Path) -> None:
    from databricks.air.workloads.node_output import NodeOutput

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    output = NodeOutput("/dev/full", str(tmp_path / "node_0.times"), name="node 0's log")
    assert output.failure is None
    output.feed(b"a line\n")  # /dev/full answers every write with ENOSPC
    assert output.failure == "no space left on device while writing node 0's log (/dev/full)"
    output.feed(b"x" * 1_000_000)  # dropped: the reader of the command's output goes on
    output.write_note("ERROR: Script failed")
    output.close()


def test_a_keeper_killed_with_its_supervisor_leaves_nothing_once_the_run_is_looked_at(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command=TREE, env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    running = wait_for(run_id, lambda s: s.status == "RUNNING" and "attempt" in s.owner)
    assert wait_until(lambda: len(processes_with_marker(marker)) >= 5, timeout=30), processes_with_marker(marker)
    supervisor, keeper = running.owner["supervisor_pid"], running.owner["attempt"]["keeper_pid"]
    os.kill(supervisor, signal.SIGKILL)  # both at once: nothing that could stop the command is left
    os.kill(keeper, signal.SIGKILL)
    assert wait_until(
        lambda: not psutil.pid_exists(keeper) or psutil.Process(keeper).status() == psutil.STATUS_ZOMBIE, timeout=5
    )
    left_before = processes_with_marker(marker)  # some may go on their own (bash's parent-death signal): a race
    got = envelope(air("get", str(run_id), "-o", "json"))["data"]  # the reader notices, and stops what is left
    assert got["status"] == "FAILED" and f"the supervisor (pid {supervisor}) ended unexpectedly" in got["message"]
    if left_before:
        assert "left without their keeper were killed now" in got["message"] or not processes_with_marker(marker), got[
            "message"
        ]
    assert wait_until(lambda: processes_with_marker(marker) == [], timeout=5), [
        (p.pid, p.cmdline()) for p in processes_with_marker(marker)
    ]
