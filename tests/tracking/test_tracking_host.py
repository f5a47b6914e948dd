"""The tracking host (issue 33): a script's tracked call has its run made and kept by a long-lived process of the
user's that keeps MLflow imported, so the script itself never imports MLflow.

Every test here runs scripts in fresh interpreters with the host switched on and ``TMPDIR`` a short folder of the
module's own, so that their host is theirs (its folder lies under ``TMPDIR``); the module stops it at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import psutil
import pytest

from process_helpers import wait_until
from databricks.air._tracking import host_start, tracking_host
from databricks.air._variables import BETA_NOTICE_SHOWN

pytestmark = pytest.mark.xdist_group("tracking-host")  # one host for the module's tests, on one worker

SCRIPT = """
import json, os, sys
from databricks.air import distributed

@distributed(num_accelerators=2, accelerator_type="CPU", timeout=TIMEOUT)
def train(steps):
    import os

    if os.environ["RANK"] == "0" and steps:
        import mlflow  # only where it logs: MLflow's import is seconds of CPU time in each rank of a fresh server

        for step in range(steps):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
    return int(os.environ["RANK"])

error = None
try:
    values = train.distributed(STEPS)
except Exception as raised:
    values, error = None, {"class": type(raised).__name__, "message": str(raised)}
print(json.dumps({"values": values, "error": error, "mlflow_here": "mlflow" in sys.modules, "pid": os.getpid(),
                  "log_dir": train.last_log_dir}))
"""


@pytest.fixture(scope="module")
def host_tmp() -> Iterator[str]:
    """A short ``TMPDIR`` (the host's socket path must fit in 107 bytes) whose host is stopped at the end."""
    folder = tempfile.mkdtemp(prefix="airh-", dir="/tmp")
    yield folder
    for host in Path(folder).glob(f"databricks-air-{os.getuid()}/tracking/*"):
        tracking_host.stop(str(host))
    shutil.rmtree(folder, ignore_errors=True)


def host_environ(host_tmp: str, **extra: str) -> Dict[str, str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_")}
    environ.pop(BETA_NOTICE_SHOWN, None)
    environ.update(
        {"TMPDIR": host_tmp, "DATABRICKS_AIR_MLFLOW": "1", "DATABRICKS_AIR_TRACKING_HOST": "1", "PYTHONUNBUFFERED": "1"}
    )
    environ.update(extra)
    return environ


def run_script(
    folder: Path, environ: Dict[str, str], steps: int = 3, timeout: float = 120, source: str = SCRIPT
) -> Dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "train_script.py"
    script.write_text(textwrap.dedent(source).replace("TIMEOUT", str(timeout)).replace("STEPS", str(steps)))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=environ, capture_output=True, text=True, timeout=timeout + 60
    )
    assert done.returncode == 0, done.stderr
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


def running_host(environ: Dict[str, str]) -> Path:
    """The folder of the host ``environ`` reaches, started if need be, once it listens."""
    code = "from databricks.air._tracking.host_start import folder, start_host; start_host(); print(folder())"
    where = Path(
        subprocess.run(
            [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    assert wait_until(lambda: (where / host_start.SOCKET).exists(), 120, interval=0.05)
    return where


def host_folders(host_tmp: str) -> List[Path]:
    return sorted(Path(host_tmp).glob(f"databricks-air-{os.getuid()}/tracking/*"))


def host_pid(host_tmp: str) -> int:
    (folder,) = host_folders(host_tmp)
    assert wait_until(lambda: (folder / host_start.PID).exists(), 60, interval=0.05)
    return int((folder / host_start.PID).read_text())


def runs(folder: Path) -> List[Any]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_a_scripts_call_is_tracked_by_the_host_on_a_private_socket_and_never_imports_mlflow(
    host_tmp: str, tmp_path: Path
) -> None:
    first = run_script(tmp_path / "one", host_environ(host_tmp))
    assert first["values"] == [0, 1] and first["error"] is None, first
    assert not first["mlflow_here"], first  # the first script started the host and waited for it
    pid = host_pid(host_tmp)
    second = run_script(tmp_path / "one", host_environ(host_tmp))
    assert not second["mlflow_here"] and host_pid(host_tmp) == pid  # the same host served it

    # no network port; a socket only this user can reach
    host = psutil.Process(pid)
    assert [c for c in host.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN] == []
    (folder,) = host_folders(host_tmp)
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    assert oct(os.stat(folder / host_start.SOCKET).st_mode & 0o777) == "0o600"

    done = {run.info.run_id: run for run in runs(tmp_path / "one")}
    assert len(done) == 2
    for run, result in zip(sorted(done.values(), key=lambda r: r.info.start_time), (first, second)):
        assert run.info.status == "FINISHED"
        assert run.data.metrics["loss"] == pytest.approx(1 / 3)  # rank 0's points, through the host's writer
        assert run.data.params["arg.steps"] == "3"
        assert run.data.tags["databricks.air.caller"].startswith(f"{result['pid']}:")  # the script, not the host
        assert run.info.run_id in result["stderr"]  # the run's line, shown by the script
        # as MLflow in the script would: the experiment named after the script, artifacts beside the store
        import mlflow

        experiment = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'one' / 'mlflow.db'}").get_experiment(
            run.info.experiment_id
        )
        assert experiment.name == "train_script"
        assert run.info.artifact_uri.startswith(str(tmp_path / "one" / "mlruns"))
        artifacts = Path(run.info.artifact_uri.removeprefix("file://")) / "logs"
        assert (artifacts / "rank_0.txt").exists()


def test_a_caller_killed_mid_call_has_its_run_ended_killed_by_the_host(host_tmp: str, tmp_path: Path) -> None:
    source = """
    import os, time
    from databricks.air import distributed

    @distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)
    def sleeper():
        time.sleep(60)

    print("calling", os.getpid(), flush=True)
    sleeper.distributed()
    """
    (tmp_path / "killed.py").write_text(textwrap.dedent(source))
    runs(tmp_path)  # the store made before the script opens it: this process reads it while the script runs
    caller = subprocess.Popen(
        [sys.executable, "killed.py"],
        cwd=tmp_path,
        env=host_environ(host_tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(runs(tmp_path)) == 1, 90)
        os.kill(caller.pid, signal.SIGKILL)
    finally:
        caller.kill()
        out, err = caller.communicate()  # at EOF once the host's process for the call, which holds them, has ended

    def ended() -> bool:
        return runs(tmp_path)[0].info.status != "RUNNING"

    assert wait_until(ended, 30, interval=0.1), out + err
    (run,) = runs(tmp_path)
    assert run.info.status == "KILLED"
    assert f"its caller (pid {caller.pid}) ended without ending the run" in run.data.tags["databricks.air.failure"]


def test_a_store_that_never_answers_times_out_in_the_caller_with_the_calls_error(host_tmp: str, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    running_host(host_environ(host_tmp))  # what is timed is the store, not the host's start
    try:
        began = time.monotonic()
        result = run_script(tmp_path, host_environ(host_tmp, MLFLOW_TRACKING_URI=uri), timeout=3)
    finally:
        listener.close()
    assert result["error"]["class"] == "LocalExecutionTimeoutError", result  # the class crossed from the host
    assert f"the MLflow store at {uri} did not answer within" in result["error"]["message"], result["stderr"]
    assert "its timeout of 3 s" in result["error"]["message"]
    assert time.monotonic() - began < 60
    assert not result["mlflow_here"]


def test_a_store_that_cannot_be_opened_fails_with_the_same_error_as_without_a_host(
    host_tmp: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("")
    uri = f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}"  # a folder that is a file
    hosted = run_script(tmp_path / "h", host_environ(host_tmp, MLFLOW_TRACKING_URI=uri))
    private = tempfile.mkdtemp(prefix="airh-off-", dir="/tmp")
    try:  # switched off: the script imports MLflow and makes its run itself, and no host is started
        here = run_script(
            tmp_path / "i", host_environ(private, MLFLOW_TRACKING_URI=uri, DATABRICKS_AIR_TRACKING_HOST="0")
        )
        assert host_folders(private) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert hosted["error"]["class"] == here["error"]["class"] == "RuntimeConfigurationError", (hosted, here)
    assert hosted["error"]["message"] == here["error"]["message"]
    assert not hosted["mlflow_here"] and here["mlflow_here"]


def test_a_script_that_imported_mlflow_makes_its_run_itself_where_it_chose(host_tmp: str, tmp_path: Path) -> None:
    source = "import mlflow\nmlflow.set_experiment('chosen')\n" + SCRIPT
    result = run_script(tmp_path, host_environ(host_tmp), source=source)
    assert result["values"] == [0, 1]
    (run,) = runs(tmp_path)
    import mlflow

    experiment = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_experiment(run.info.experiment_id)
    assert experiment.name == "chosen"
    assert run.data.tags["databricks.air.caller"].startswith(f"{result['pid']}:")


def test_an_idle_host_exits_and_removes_its_socket(tmp_path: Path) -> None:
    private = tempfile.mkdtemp(prefix="airh-idle-", dir="/tmp")
    try:
        environ = host_environ(private, DATABRICKS_AIR_TRACKING_HOST_IDLE_SECONDS="1")
        assert run_script(tmp_path, environ, steps=0)["values"] == [0, 1]
        (folder,) = host_folders(private)
        first = host_pid(private)
        assert wait_until(lambda: not psutil.pid_exists(first), 30, interval=0.1)
        assert not (folder / host_start.SOCKET).exists()  # the next call finds none, and starts one as the first did
    finally:
        for folder in host_folders(private):
            tracking_host.stop(str(folder))
        shutil.rmtree(private, ignore_errors=True)


def test_one_host_runs_per_folder(tmp_path: Path) -> None:
    folder = tmp_path / "host"
    folder.mkdir(mode=0o700)
    lock = host_start.take_lock(str(folder))
    assert lock is not None
    try:
        assert host_start.take_lock(str(folder)) is None  # what a second host, or a caller's probe, finds
        from databricks.air._engine.processes import python_command

        second = subprocess.run(python_command(tracking_host.__name__, [str(folder)]), timeout=60)
        assert second.returncode == 0 and not (folder / host_start.SOCKET).exists()  # it left at once
    finally:
        os.close(lock)


def test_preferred_only_for_a_script_that_has_not_imported_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_TRACKING_HOST", "1")
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    monkeypatch.delenv("RANK", raising=False)
    assert "mlflow" in sys.modules  # this test process imported it: its calls make their runs themselves
    assert not host_start.preferred()
    monkeypatch.delitem(sys.modules, "mlflow")
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.setattr(host_start, "_interactive", lambda: False)
    assert host_start.preferred()
    for variable, value in (("DATABRICKS_AIR_TRACKING_HOST", "0"), ("DATABRICKS_AIR_MLFLOW", "0"), ("RANK", "0")):
        with monkeypatch.context() as patch:
            patch.setenv(variable, value)
            assert not host_start.preferred(), variable
    monkeypatch.setattr(host_start, "_interactive", lambda: True)  # a notebook imports MLflow between its cells
    assert not host_start.preferred()


def test_a_host_that_dies_as_it_starts_costs_a_script_seconds_and_it_makes_its_run_itself(tmp_path: Path) -> None:
    private = tempfile.mkdtemp(prefix="airh-dead-", dir="/tmp")
    try:
        environ = host_environ(private)
        code = "from databricks.air._tracking.host_start import folder; print(folder())"
        where = subprocess.run(
            [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
        ).stdout.strip()
        (Path(where) / host_start.SOCKET).mkdir()  # where the host binds its socket: it fails, and ends
        began = time.monotonic()
        result = run_script(tmp_path, environ, steps=0)
        took = time.monotonic() - began
        assert result["values"] == [0, 1] and result["mlflow_here"], result
        assert "the tracking host ended as it started" in result["stderr"], result["stderr"]
        assert took < 45, took  # not the minute a host that is still starting is given
        assert "IsADirectoryError" in (Path(where) / host_start.LOG).read_text()  # why, in its log
        (run,) = runs(tmp_path)
        assert run.info.status == "FINISHED"
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_the_orphan_sweep_of_a_call_leaves_its_own_run_to_it(tmp_path: Path) -> None:
    # Made by the host, a call's run may lose its caller while the sweep that its own opening started runs: the host's
    # process for that caller ends it, saying why, and the sweep must not end it first with its own words.
    import mlflow

    from databricks.air._tracking import call_run

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    identity = call_run.caller_identity(gone.pid)
    gone.wait()
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    tags = {call_run.CALLER_TAG: identity, "databricks.air.host": socket.gethostname()}
    own, other = (client.create_run("0", tags=tags).info.run_id for _ in range(2))
    assert call_run.end_orphaned_runs(client, "0", own_run_id=own) == [other]
    assert client.get_run(own).info.status == "RUNNING" and client.get_run(other).info.status == "KILLED"
