"""A run's life with real processes: variables, strict bash, retries, timeout, cancel, a killed supervisor, concurrent
runs, idempotency, and ``list``/``get``/``logs`` in both output formats."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Dict

import pytest

from process_helpers import processes_with_marker, wait_until
from workload_support import AIR, air, envelope, events, state, submit, wait_for, wait_for_end, write_workload

mlflow = pytest.importorskip("mlflow")

SHOW_VARIABLES = """\
for name in NUM_NODES NODE_RANK MASTER_ADDR MASTER_PORT WORLD_SIZE LOCAL_WORLD_SIZE CODE_SOURCE_PATH \\
            HYPERPARAMETERS_PATH MLFLOW_RUN_ID CUDA_VISIBLE_DEVICES GREETING; do
  echo "$name=${!name-<unset>}"
done
echo "cwd=$PWD"
set -o | grep pipefail
cat "$HYPERPARAMETERS_PATH"
"""

# A process tree that a process group cannot catch: a child in a session of its own (as torchrun starts its workers),
# one that ignores SIGTERM (so only SIGKILL ends it), and a grandchild.
PROCESS_TREE = """\
setsid sleep 300 &
bash -c 'trap "" TERM; sleep 300 & wait' &
python -c 'import subprocess, time; subprocess.Popen(["sleep", "300"]); time.sleep(300)' &
echo started
wait
"""


def _values(output: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line and not line.startswith(" "))


def test_the_command_runs_under_strict_bash_in_its_snapshot_with_the_node_variables(tmp_path: Path) -> None:
    code = tmp_path / "project"
    code.mkdir()
    path = write_workload(
        tmp_path,
        command=SHOW_VARIABLES,
        code_source={"root_path": "project"},
        parameters={"lr": "1e-3", "layers": [64, 64]},
        env_variables={"GREETING": "hi there"},
    )
    done = air("run", "-f", str(path), "--watch")
    assert done.returncode == 0, done.stderr
    values = _values(done.stdout)
    run_id = int(done.stderr.split("air: run ")[1].split()[0])
    run_dir = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / str(run_id)
    assert values["NUM_NODES"] == "1" and values["NODE_RANK"] == "0" and values["MASTER_ADDR"] == "127.0.0.1"
    assert values["WORLD_SIZE"] == "2" and values["LOCAL_WORLD_SIZE"] == "2" and values["MASTER_PORT"].isdigit()
    assert values["CODE_SOURCE_PATH"] == str(run_dir / "code" / "project") == values["cwd"]
    assert values["HYPERPARAMETERS_PATH"] == str(run_dir / "hyperparameters.yaml")
    assert values["MLFLOW_RUN_ID"] == "<unset>"  # tracking is off in these tests
    assert values["CUDA_VISIBLE_DEVICES"] == ""  # CPU ranks see no GPU
    assert values["GREETING"] == "hi there"
    assert re.search(r"^pipefail\s+on$", done.stdout, re.MULTILINE)
    assert "lr: 1e-3\nlayers:\n- 64\n- 64\n" in done.stdout
    assert "run 1 ended SUCCESS" in done.stderr
    same = subprocess.run(
        [sys.executable, "-m", "databricks.air", "get", str(run_id), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert same.returncode == 0 and json.loads(same.stdout)["data"]["status"] == "SUCCESS"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ('echo "$NOT_SET_ANYWHERE"\necho never', "NOT_SET_ANYWHERE: unbound variable"),
        ("false | cat\necho never", ""),
        ("exit 3\necho never", ""),
    ],
)
def test_a_failing_line_fails_the_run(tmp_path: Path, command: str, message: str) -> None:
    path = write_workload(tmp_path, command=command)
    done = air("run", "-f", str(path), "--watch", "-o", "json")
    assert done.returncode == 1
    lines = [e["line"] for e in events(done) if e.get("type") == "LOG"]
    assert "never" not in lines and (not message or any(message in line for line in lines))
    assert lines[-1].startswith("ERROR: Script failed with exit code ")
    final = envelope(done)["data"]
    assert final["status"] == "FAILED" and "the command failed (exit code" in final["message"]


@pytest.mark.slow
def test_fails_twice_then_passes_with_max_retries_2(tmp_path: Path, mlflow_store: str) -> None:
    experiment = f"retries-{uuid.uuid4().hex[:8]}"
    counter = tmp_path / "attempts"
    command = f"""n=$(cat {counter} 2>/dev/null || echo 0)
echo $((n + 1)) > {counter}
echo "attempt $n"
[ "$n" -ge 2 ]
"""
    path = write_workload(tmp_path, experiment_name=experiment, command=command, max_retries=2)
    done = air(
        "run",
        "-f",
        str(path),
        "--watch",
        "-o",
        "json",
        env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": mlflow_store},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    stream = events(done)
    assert stream[0]["type"] == "SUBMITTED"
    changes = [(e["previous_status"], e["status"]) for e in stream if e.get("type") == "STATUS"]
    assert changes.count(("RUNNING", "WAITING_FOR_RETRY")) == 2 and changes[-1] == ("RUNNING", "SUCCESS")
    assert [e["line"] for e in stream if e.get("type") == "LOG" and e["line"].startswith("attempt")] == [
        "attempt 0",
        "attempt 1",
        "attempt 2",
    ]
    run_id = stream[0]["run_id"]
    final = state(run_id)
    assert final.status == "SUCCESS" and [a.status for a in final.attempt_list] == ["FAILED", "FAILED", "SUCCESS"]
    client = mlflow.MlflowClient(mlflow_store)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], order_by=["start_time"])
    assert [r.data.tags["databricks.air.workload.attempt"] for r in runs] == ["0", "1", "2"]
    assert {r.data.tags["databricks.air.workload.run_id"] for r in runs} == {str(run_id)}
    assert [r.info.status for r in runs] == ["FAILED", "FAILED", "FINISHED"]
    assert [r.info.run_id for r in runs] == [a.mlflow_run_id for a in final.attempt_list]
    assert runs[0].data.params["max_retries"] == "2"
    assert "exit code 1" in runs[0].data.tags["databricks.air.failure"]
    artifacts = {item.path for item in client.list_artifacts(runs[2].info.run_id)}
    assert {"workload.yaml", "logs"} <= artifacts
    logs = [item.path for item in client.list_artifacts(runs[2].info.run_id, "logs")]
    assert logs == ["logs/node_0.log"]
    got = air("get", str(run_id))
    assert got.returncode == 0 and runs[2].info.run_id in got.stdout and "mlflow ui --backend-store-uri" in got.stdout


@pytest.mark.slow
def test_an_attempt_past_its_timeout_is_timedout_and_retried(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(
        tmp_path,
        command="setsid sleep 300 &\nsleep 300",
        max_retries=1,
        timeout_minutes=60,
        env_variables={"AIR_TEST_MARKER": marker},
    )
    done = air("run", "-f", str(path), "--watch", "-o", "json", env={"DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS": "1"})
    assert done.returncode == 1
    final = envelope(done)["data"]
    assert final["status"] == "TIMEDOUT" and "ran past its timeout (60 min)" in final["message"]
    run = state(events(done)[0]["run_id"])
    assert [a.status for a in run.attempt_list] == ["TIMEDOUT", "TIMEDOUT"]
    assert processes_with_marker(marker) == []


@pytest.mark.slow
def test_cancel_stops_every_process_the_command_started(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command=PROCESS_TREE, env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    wait_for(run_id, lambda s: s.status == "RUNNING")
    assert wait_until(lambda: len(processes_with_marker(marker)) >= 6, timeout=30), processes_with_marker(marker)
    done = air("cancel", str(run_id))
    assert done.returncode == 0, done.stderr
    assert f"Run {run_id}: canceled" in done.stdout and "1 run(s) canceled" in done.stdout
    assert processes_with_marker(marker) == []  # cancel returns once the run is CANCELED, with nothing left
    final = state(run_id)
    assert final.status == "CANCELED" and final.message == "canceled (air cancel)"
    again = air("cancel", str(run_id), "-o", "json")
    assert again.returncode == 0 and envelope(again)["data"]["cancelled"] == [run_id]


def test_a_killed_supervisor_takes_its_command_along_and_the_run_reads_failed(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    path = write_workload(tmp_path, command=PROCESS_TREE, env_variables={"AIR_TEST_MARKER": marker})
    run_id = submit(path)
    running = wait_for(run_id, lambda s: s.status == "RUNNING")
    assert wait_until(lambda: len(processes_with_marker(marker)) >= 6, timeout=30)
    supervisor = running.owner["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    assert wait_until(lambda: processes_with_marker(marker) == [], timeout=15), processes_with_marker(marker)
    done = air("get", str(run_id), "-o", "json")
    data = envelope(done)["data"]
    assert data["status"] == "FAILED"
    assert f"the supervisor (pid {supervisor}) ended unexpectedly" in data["message"]
    assert data["attempts"][0]["status"] == "FAILED"
    listed = envelope(air("list", "-o", "json"))["data"]["runs"]
    assert run_id not in [item["run_id"] for item in listed]  # no longer active


def test_two_runs_at_once_get_two_ids_and_two_ports(tmp_path: Path) -> None:
    path = write_workload(tmp_path, command='echo "port=$MASTER_PORT"\nsleep 1')
    started = [
        subprocess.Popen(
            [AIR, "run", "-f", str(path), "--watch", "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=120) for process in started]
    assert [process.returncode for process in started] == [0, 0], outputs
    found = [[json.loads(line) for line in out.splitlines()] for out, _ in outputs]
    ids = {stream[0]["run_id"] for stream in found}
    ports = {e["line"] for stream in found for e in stream if e.get("type") == "LOG"}
    assert len(ids) == 2 and len(ports) == 2


def test_an_idempotency_key_returns_the_existing_run(tmp_path: Path) -> None:
    path = write_workload(tmp_path, command="true", idempotency_token="nightly-2026-08-21")
    first = submit(path)
    again = air("run", "-f", str(path), "-o", "json")
    assert again.returncode == 0 and envelope(again)["data"]["run_id"] == first
    assert envelope(again)["data"]["created"] is False and "already names run" in again.stderr
    other = submit(path, "--idempotency-key", "another-key")  # the flag beats the file's token
    assert other != first
    assert air("run", "-f", str(path), "--idempotency-key", "k" * 65).returncode == 2


@pytest.mark.slow
def test_list_get_and_logs_in_text_and_json(tmp_path: Path) -> None:
    command = 'echo "step 1 loss 0.5"\necho "RuntimeError: CUDA error: out of memory"\necho "step 2"'
    ok = submit(write_workload(tmp_path, "ok.yaml", experiment_name="vision-ok", command=command))
    failed = submit(write_workload(tmp_path, "bad.yaml", experiment_name="nlp-bad", command="echo oops\nexit 4"))
    wait_for_end(ok), wait_for_end(failed)

    assert air("list").stdout.startswith("No runs.")  # active runs only by default
    listed = air("list", "--all-status")
    header, *rows = listed.stdout.splitlines()
    assert header.split() == [
        "Run",
        "ID",
        "Experiment",
        "Status",
        "Started",
        "Duration",
        "MLflow",
        "User",
        "Accelerators",
    ]
    assert rows[0].split()[:3] == [str(failed), "nlp-bad", "FAILED"] and rows[1].split()[:3] == [
        str(ok),
        "vision-ok",
        "SUCCESS",
    ]
    data = envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"]
    assert [item["run_id"] for item in data] == [failed, ok]
    assert set(data[0]) >= {"run_id", "run_name", "user", "status", "started_at", "is_sweep"}
    only = envelope(air("-o", "json", "list", "--all-status", "--filter", "experiment=VISION*"))["data"]["runs"]
    assert [item["run_id"] for item in only] == [ok]
    assert envelope(air("list", "--all-status", "--limit", "1", "-o", "json"))["data"]["runs"][0]["run_id"] == failed
    assert envelope(air("list", "--all-status", "--filter", "num_accelerators=8", "-o", "json"))["data"]["runs"] == []

    text = air("get", str(ok)).stdout
    assert "╭─ Configuration" in text and "experiment_name: vision-ok" in text and "╭─ Metadata" in text
    assert "CUDA out of memory" in text and "hint: Use a smaller batch" in text
    got = envelope(air("get", str(failed), "-o", "json"))["data"]
    assert got["status"] == "FAILED" and got["attempt_number"] == 0 and got["experiment_name"] == "nlp-bad"
    assert got["attempts"][0]["exit_code"] == 4 and got["configuration"]["command"] == "echo oops\nexit 4"
    assert (
        air("get", "999").returncode == 1 and envelope(air("get", "999", "-o", "json"))["error"]["code"] == "NOT_FOUND"
    )

    shown = air("logs", str(ok))
    assert (
        shown.returncode == 0 and shown.stdout == "step 1 loss 0.5\nRuntimeError: CUDA error: out of memory\nstep 2\n"
    )
    stream = events(air("logs", str(ok), "-o", "json"))
    assert [e["type"] for e in stream] == ["LOG", "ALERT", "LOG", "LOG"]
    assert stream[1]["pattern"] == "cuda-oom" and stream[1]["line_number"] == 2 and stream[1]["node"] == 0
    assert air("logs", str(ok), "--tail", "1").stdout == "step 2\n"
    assert air("logs", str(ok), "--lines", "1").stdout == "step 2\n"  # the older name
    assert air("logs", str(failed)).returncode == 1  # logs exit 1 unless the run succeeded
    assert air("logs", str(ok), "--retry", "1").returncode == 2
    assert air("logs", str(ok), "--node", "1").returncode == 2
    assert air("logs", str(ok), "--tail", "1", "--download-to", "x").returncode == 2
    download = air("logs", str(ok), "--download-to", str(tmp_path / "out"))
    assert download.returncode == 0
    assert (tmp_path / "out" / "logs" / "node_0.log").read_text().startswith("step 1 loss 0.5\n")


def test_runs_that_cannot_run_here_are_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    two_nodes = write_workload(
        tmp_path, "a.yaml", compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 16}, command="true"
    )
    done = air("run", "-f", str(two_nodes))
    assert done.returncode == 2 and "is 2 nodes of 8" in done.stderr and "Ray backend" in done.stderr
    image = write_workload(tmp_path, "b.yaml", command="true", environment={"unity_catalog_image": "c.s.img:1"})
    done = air("run", "-f", str(image))
    assert done.returncode == 2 and "needs a container runtime" in done.stderr
    assert not (Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs").exists()


def test_a_gpu_workload_runs_on_cpu_ranks_when_asked(tmp_path: Path) -> None:
    path = write_workload(
        tmp_path,
        compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 8},
        command='echo "$LOCAL_WORLD_SIZE/$WORLD_SIZE"',
    )
    done = air("run", "-f", str(path), "--watch", env={"DATABRICKS_AIR_ACCELERATOR_TYPE": "CPU"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "8/8\n" and "running GPU_8xH100 x 8 as 8 CPU rank(s)" in done.stderr


def test_cancel_all_asks_first_without_a_terminal(tmp_path: Path) -> None:
    run_id = submit(write_workload(tmp_path, command="sleep 300"))
    wait_for(run_id, lambda s: s.status == "RUNNING")
    refused = air("cancel", "--all")
    assert refused.returncode == 2 and "add -y" in refused.stderr and state(run_id).status == "RUNNING"
    done = air("cancel", "--all", "-y", "-o", "json")
    assert done.returncode == 0 and envelope(done)["data"] == {"cancelled": [run_id], "all": True}
    assert state(run_id).status == "CANCELED"
    assert air("cancel").returncode == 2


@pytest.mark.slow
def test_logs_follow_an_active_run_through_its_retries_until_it_ends(tmp_path: Path) -> None:
    gate, counter = tmp_path / "gate", tmp_path / "count"
    command = f"""n=$(cat {counter} 2>/dev/null || echo 0)
echo $((n + 1)) > {counter}
echo "attempt $n waits"
while [ ! -e {gate} ]; do sleep 0.05; done
echo "attempt $n done"
[ "$n" -ge 1 ]
"""
    run_id = submit(write_workload(tmp_path, command=command, max_retries=1))
    wait_for(run_id, lambda s: s.status == "RUNNING")
    follower = subprocess.Popen([AIR, "logs", str(run_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = follower.stdout.readline()  # it follows attempt 0 now
    gate.touch()
    out, err = follower.communicate(timeout=60)
    out = first + out
    assert follower.returncode == 0, err
    assert out.startswith("attempt 0 waits\nattempt 0 done\nERROR: Script failed with exit code 1")
    assert out.endswith("attempt 1 waits\nattempt 1 done\n")
    assert air("logs", str(run_id), "--retry", "0", "--tail", "1").stdout.startswith("ERROR: Script failed")
    assert air("logs", str(run_id), "--minutes", "10").stdout == "attempt 1 waits\nattempt 1 done\n"
    assert air("logs", str(run_id), "--minutes", "10", "--tail", "5").returncode == 2


@pytest.mark.slow
def test_a_submitted_run_shows_its_mlflow_run_as_the_decorator_does(tmp_path: Path, mlflow_store: str) -> None:
    experiment = f"link-{uuid.uuid4().hex[:8]}"
    path = write_workload(tmp_path, experiment_name=experiment, command="true")
    done = air(
        "run", "-f", str(path), "--no-cache", env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": mlflow_store}
    )
    assert done.returncode == 0, done.stderr
    run_id = int(re.search(r"Run ID: (\d+)", done.stdout).group(1))
    final = wait_for_end(run_id)
    mlflow_run = final.latest.mlflow_run_id
    assert f"Experiment: {experiment}" in done.stdout
    assert (
        f"MLflow run {experiment} ({mlflow_run}) in {mlflow_store}; to see it: mlflow ui --backend-store-uri "
        f"{mlflow_store}" in done.stdout
    )


def test_an_unreachable_tracking_server_fails_the_submission(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the probe is closed
    path = write_workload(tmp_path, command="true")
    done = air(
        "run", "-f", str(path), env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"}
    )
    assert done.returncode == 1 and "cannot be reached" in done.stderr and "DATABRICKS_AIR_MLFLOW=0" in done.stderr
    assert not (Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs").exists()


def test_a_follower_that_polls_after_several_changes_still_reports_each_one() -> None:
    # A retry delay of 0 lets an attempt fail and the next start within one poll of `logs --follow`/`--watch`: the
    # statuses a follower reports come from the attempts recorded, not from two samples of the status.
    from databricks.air.workloads import statuses
    from databricks.air.workloads.logs import status_path
    from databricks.air.workloads.run_state import RunState

    def at(status: str, attempts: int) -> list:
        return status_path(RunState(run_id=1, status=status, submitted_at=0.0, attempts=[{}] * attempts))

    history = [
        at("PENDING", 0),
        at("RUNNING", 1),
        at("WAITING_FOR_RETRY", 1),
        at("RUNNING", 2),
        at("RUNNING", 3),
        at("SUCCESS", 3),
    ]
    for before, after in zip(history, history[1:]):
        assert after[: len(before)] == before
    assert history[-1] == [
        statuses.PENDING,
        statuses.RUNNING,
        statuses.WAITING_FOR_RETRY,
        statuses.RUNNING,
        statuses.WAITING_FOR_RETRY,
        statuses.RUNNING,
        statuses.SUCCESS,
    ]
    assert at("CANCELED", 0) == [statuses.PENDING, statuses.CANCELED]


def test_options_of_the_ray_backend_are_checked_before_anything_is_recorded(tmp_path: Path) -> None:
    path = write_workload(tmp_path, command="echo never")
    local = air("run", "-f", str(path), "--nodes", "2")
    assert local.returncode == 2 and "--nodes: not an option of the local backend" in local.stderr
    assert "--backend ray" in local.stderr
    no_address = air("run", "-f", str(path), "--backend", "ray", env={"RAY_ADDRESS": ""})
    assert no_address.returncode == 2 and "--backend ray needs the Ray cluster's address" in no_address.stderr
    uneven = air("run", "-f", str(path), "--backend", "ray", "--address", "http://127.0.0.1:9", "--nodes", "3")
    assert (
        uneven.returncode == 2 and "--nodes 3: the node count must divide compute.num_accelerators (2)" in uneven.stderr
    )
    nobody = air("run", "-f", str(path), "--backend", "ray", "--address", "http://127.0.0.1:9")
    assert nobody.returncode != 0 and "no Ray dashboard answers at http://127.0.0.1:9" in nobody.stderr
    assert envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"] == []


def test_a_follower_shows_running_before_the_lines_and_the_end_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A short run can start, print and end between two polls of `air run --watch`: what a poll finds is still shown
    # in the order it happened (RUNNING, the attempt's lines, its retry's wait, the next attempt...), never a line
    # before the RUNNING that preceded it.
    from types import SimpleNamespace

    from databricks.air.workloads import logs
    from databricks.air.workloads.run_state import RunState

    class Folder:
        def node_log(self, attempt: int, node: int) -> str:
            return str(tmp_path / f"attempt_{attempt}.log")

        def node_times(self, attempt: int, node: int) -> str:
            return str(tmp_path / f"attempt_{attempt}.times")

    def state(status: str, attempts: int) -> RunState:
        return RunState(run_id=1, status=status, submitted_at=0.0, attempts=[{}] * attempts)

    def write(attempt: int, text: str) -> None:
        with open(Folder().node_log(attempt, 0), "a") as log:
            log.write(text)

    polls = iter(
        [
            # each poll: what happened since the one before, then the state it reads
            (lambda: write(0, "attempt 0 line 1\n"), state("RUNNING", 1)),
            (lambda: write(0, "attempt 0 line 2\n"), state("WAITING_FOR_RETRY", 1)),
            (lambda: (write(0, "attempt 0 ends\n"), write(1, "attempt 1 line 1\n")), state("SUCCESS", 2)),
        ]
    )

    last = state("SUCCESS", 2)

    def load_run(folder: Any) -> Any:
        happened, now = next(polls, (lambda: None, last))  # after the end: nothing more happens
        happened()
        return SimpleNamespace(state=now)

    monkeypatch.setattr(logs, "load_run", load_run)
    run = SimpleNamespace(folder=Folder(), state=state("PENDING", 0))
    shown = [
        item.status if item.type == "STATUS" else item.data.decode().strip()
        for item in logs._follow(run, 0, None, None, None, True, 0.0)
    ]
    assert shown == [
        "PENDING",
        "RUNNING",
        "attempt 0 line 1",
        "attempt 0 line 2",
        "WAITING_FOR_RETRY",
        "attempt 0 ends",
        "RUNNING",
        "attempt 1 line 1",
        "SUCCESS",
    ]


@pytest.mark.slow
def test_six_submissions_at_once_in_a_fresh_folder_all_succeed(tmp_path: Path) -> None:
    """Six ``air run --watch`` at the same moment, tracking into a store that does not exist yet: each attempt's
    MLflow run is made after the store's tables are made and migrated once (under a lock), so none fails."""
    import concurrent.futures

    path = write_workload(tmp_path, command="echo done", compute={"accelerator_type": "CPU", "num_accelerators": 1})
    environ = {"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"}
    (tmp_path / "fresh").mkdir()
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        done = list(pool.map(lambda _: air("run", "-f", str(path), "--watch", env=environ, timeout=300), range(6)))
    assert [d.returncode for d in done] == [0] * 6, [d.stderr[-1500:] for d in done if d.returncode]
    assert all(d.stdout == "done\n" for d in done)
    import mlflow

    runs = mlflow.MlflowClient(environ["MLFLOW_TRACKING_URI"]).search_runs(
        [e.experiment_id for e in mlflow.MlflowClient(environ["MLFLOW_TRACKING_URI"]).search_experiments()]
    )
    assert len(runs) == 6 and {run.info.status for run in runs} == {"FINISHED"}


RESUMING_COMMAND = """python - <<'EOF'
import os, signal
import torch
from databricks.air.data import Checkpointer

torch.manual_seed(0)
model = torch.nn.Linear(2, 1, bias=False)
initial = model.weight.sum().item()
checkpointer = Checkpointer(keep=2)  # AIR_CHECKPOINT_DIR: the run's, the same in every attempt
start = checkpointer.restore(model=model)
print(f"attempt starts at step {start}", flush=True)
for step in range((start or 0) + 1, 11):
    with torch.no_grad():
        model.weight += 1
    if step % 2 == 0:
        checkpointer.save(step, model=model)
    if start is None and step == 5:
        os.kill(os.getpid(), signal.SIGKILL)  # the first attempt dies between two checkpoints
print(f"done: gained {model.weight.sum().item() - initial:g}", flush=True)
EOF
"""


@pytest.mark.slow
def test_a_retried_workload_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    path = write_workload(
        tmp_path, command=RESUMING_COMMAND, max_retries=1, compute={"accelerator_type": "CPU", "num_accelerators": 1}
    )
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = air(
        "run", "-f", str(path), "--watch", timeout=300, env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": store}
    )
    assert done.returncode == 0, done.stderr
    assert "attempt starts at step None" in done.stdout and "attempt starts at step 4" in done.stdout
    assert "done: gained 20" in done.stdout  # 10 steps of +1 on 2 weights: none lost, none twice
    run_id = int(done.stderr.split("air: run ")[1].split()[0])
    checkpoints = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / str(run_id) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.startswith("step_")) == ["step_10", "step_8"]
    import mlflow

    client = mlflow.MlflowClient(store)
    first, second = sorted(
        client.search_runs([e.experiment_id for e in client.search_experiments()]),
        key=lambda run: int(run.data.tags["databricks.air.workload.attempt"]),
    )
    assert second.data.tags["databricks.air.workload.previous_attempt_run_id"] == first.info.run_id
    assert first.data.tags["databricks.air.workload.next_attempt_run_id"] == second.info.run_id
