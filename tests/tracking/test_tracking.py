"""One MLflow run per call: where it goes, what it records, how it ends, and a real `mlflow server`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mlflow_fixtures import free_port, only_run, store  # noqa: F401 - fixtures (mlflow_server: conftest.py)
from process_helpers import wait_until
from databricks.air import distributed
from databricks.air.exceptions import LocalExecutionTimeoutError, RuntimeConfigurationError, SerializationError

mlflow = pytest.importorskip("mlflow")

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def log_losses(steps: int) -> int:
    import mlflow
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(steps):
        mlflow.log_metric("loss", 1.0 / (step + 1) + rank, step=step)
    mlflow.log_metric(f"rank{rank}_done", 1)
    print(f"rank {rank} logged {steps} steps")
    dist.destroy_process_group()
    return rank


@pytest.mark.slow
def test_a_call_is_one_run_with_every_ranks_metrics_params_tags_and_logs(
    store: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert cpu2(log_losses).distributed(3) == [0, 1]
    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.status == "FINISHED"
    assert run.data.params == {
        "num_accelerators": "2",
        "accelerator_type": "CPU",
        "timeout": "120",
        "function": "log_losses",
        "arg.steps": "3",  # the call's arguments: what tells the trials of a sweep apart
    }
    assert run.data.tags["databricks.air.version"] == __import__("databricks.air").air.__version__
    assert run.data.tags["databricks.air.host"] == socket.gethostname()
    assert {"rank0_done", "rank1_done", "duration_seconds"} <= set(run.data.metrics)
    assert len(client.get_metric_history(run.info.run_id, "loss")) == 6  # 3 steps from each rank
    logs = sorted(a.path for a in client.list_artifacts(run.info.run_id, "logs"))
    assert logs == ["logs/rank_0.txt", "logs/rank_1.txt"]
    text = Path(client.download_artifacts(run.info.run_id, "logs/rank_1.txt")).read_text()
    assert "rank 1 logged 3 steps" in text
    err = capfd.readouterr().err
    assert f"MLflow run log_losses ({run.info.run_id}) in {store}" in err
    assert f"mlflow ui --backend-store-uri {store}" in err


def test_a_call_inside_an_active_run_is_a_nested_child(store: str) -> None:
    mlflow.set_experiment("parent-experiment")
    with mlflow.start_run() as parent:
        cpu2(log_losses).distributed(1)
        assert mlflow.active_run().info.run_id == parent.info.run_id  # the caller's run is still the active one
    client = mlflow.MlflowClient(store)
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert len(children) == 1 and children[0].info.status == "FINISHED"


@pytest.mark.slow
def test_the_experiment_set_in_the_caller_then_the_environment(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = mlflow.MlflowClient(store)
    mlflow.set_experiment("chosen-in-code")
    cpu2(lambda: None).distributed()
    from mlflow.tracking import fluent

    fluent._active_experiment_id = None
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-the-environment")
    cpu2(lambda: None).distributed()
    for name in ("chosen-in-code", "from-the-environment"):
        experiment = client.get_experiment_by_name(name)
        assert len(client.search_runs([experiment.experiment_id])) == 1


@pytest.mark.slow
def test_a_script_gets_an_experiment_named_after_it(store: str, tmp_path: Path) -> None:
    script = tmp_path / "my_training_job.py"
    script.write_text(
        textwrap.dedent(
            """
            from databricks.air import distributed

            @distributed(num_accelerators=2, accelerator_type="CPU")
            def work():
                return 1

            work.distributed()
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    experiment = mlflow.MlflowClient(store).get_experiment_by_name("my_training_job")
    assert experiment is not None


def test_a_function_that_starts_its_own_run_still_lands_in_the_calls_run(store: str) -> None:
    def own_run() -> str:
        import mlflow

        with mlflow.start_run() as run:
            mlflow.log_metric("inside", 1.0)
            return run.info.run_id

    run_ids = cpu2(own_run).distributed()
    run = only_run(mlflow.MlflowClient(store))
    assert run_ids == [run.info.run_id] * 2
    assert run.data.metrics["inside"] == 1.0


@pytest.mark.slow
def test_a_failing_call_is_a_failed_run_with_its_report(store: str) -> None:
    def fail() -> None:
        if os.environ["RANK"] == "1":
            raise ValueError("bad batch")

    with pytest.raises(ValueError):
        cpu2(fail).distributed()
    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.status == "FAILED"
    assert "rank 1 of 2 raised ValueError: bad batch" in run.data.tags["databricks.air.failure"]
    report = Path(client.download_artifacts(run.info.run_id, "failure.txt")).read_text()
    assert "Traceback from rank 1" in report
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "logs")) == [
        "logs/rank_0.txt",
        "logs/rank_1.txt",
    ]


def test_a_timeout_is_a_failed_run(store: str) -> None:
    with pytest.raises(LocalExecutionTimeoutError):  # (the timeout covers making the run too: 1 s was too short)
        distributed(num_accelerators=2, accelerator_type="CPU", timeout=5)(time.sleep).distributed(30)
    assert only_run(mlflow.MlflowClient(store)).info.status == "FAILED"


@pytest.mark.slow
def test_a_serialization_failure_records_no_run(store: str) -> None:
    # Found before anything is recorded, like a bad setting: the call never started, so it is no run.
    lock = threading.Lock()

    with pytest.raises(SerializationError, match="cannot ship"):
        cpu2(lambda: lock.locked()).distributed()
    client = mlflow.MlflowClient(store)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


@pytest.mark.slow
def test_an_interrupted_call_is_a_killed_run(store: str, tmp_path: Path) -> None:
    started = tmp_path / "started"

    def wait(flag: str) -> None:
        Path(flag).touch()
        time.sleep(60)

    def interrupt_when_started() -> None:
        if wait_until(started.exists, 60):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt_when_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        cpu2(wait).distributed(str(started))
    assert only_run(mlflow.MlflowClient(store)).info.status == "KILLED"


KILLED_MID_CALL = """
    import os, pathlib, sys
    from databricks.air import distributed

    @distributed(accelerator_type="CPU", num_accelerators=2, timeout=120)
    def wait(flag):
        import os, pathlib, time
        if os.environ["RANK"] == "0":
            pathlib.Path(flag).write_text(os.environ["DATABRICKS_AIR_METRICS_ADDRESS"])
        time.sleep(60)

    wait.distributed(sys.argv[1])
"""


@pytest.mark.slow
def test_the_run_and_metrics_folder_of_a_killed_caller_are_ended_by_the_next_call(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kill -9 of the caller left its run RUNNING for ever and its metrics socket's folder in /tmp. The next call
    # ends such runs KILLED (the caller's pid and start time are in a tag) and removes such folders (their lock
    # died with their owner).
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "killed-callers")
    script, flag = tmp_path / "caller.py", tmp_path / "started"
    script.write_text(textwrap.dedent(KILLED_MID_CALL))
    caller = subprocess.Popen(
        [sys.executable, str(script), str(flag)],
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(flag.exists, 120), "the call did not start"
    finally:
        caller.kill()
        caller.wait()
    folder = Path(flag.read_text()).parent
    client = mlflow.MlflowClient(store)
    killed = only_run(client, "killed-callers")
    assert killed.info.status == "RUNNING"  # its folder, left behind too, may go meanwhile: any call removes such

    assert cpu2(lambda: 1).distributed() == [1, 1]
    assert not folder.exists()
    assert wait_until(lambda: client.get_run(killed.info.run_id).info.status == "KILLED", 30)
    assert "ended without ending the run" in client.get_run(killed.info.run_id).data.tags["databricks.air.failure"]
    statuses = sorted(
        run.info.status for run in client.search_runs([client.get_experiment_by_name("killed-callers").experiment_id])
    )
    assert statuses == ["FINISHED", "KILLED"]


@pytest.mark.slow
def test_logs_are_uploaded_while_the_call_runs(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_LOG_UPLOAD_SECONDS", "0.5")
    client = mlflow.MlflowClient(store)
    seen = threading.Event()

    def watch() -> None:
        def uploaded() -> bool:
            runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
            return any(r.info.status == "RUNNING" and client.list_artifacts(r.info.run_id, "logs") for r in runs)

        if wait_until(uploaded, 30, interval=0.2):
            seen.set()

    def slow() -> None:
        print("working", flush=True)
        time.sleep(4)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu2(slow).distributed()
    watcher.join(1)
    assert seen.is_set()


def test_tracking_can_be_turned_off(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "0")
    (tmp_path / "mlflow.db").unlink()  # the fixture's store is made ahead: tracking off makes none

    def no_run() -> bool:
        return "MLFLOW_RUN_ID" in os.environ

    assert cpu2(no_run).distributed() == [False, False]
    assert not (tmp_path / "mlflow.db").exists()


def test_an_unreachable_server_fails_before_any_rank_starts(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeConfigurationError, match=rf"{uri} cannot be reached.*DATABRICKS_AIR_MLFLOW=0"):
        cpu2(log_losses).distributed(1)
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not [p for p in started if "rank_server" not in " ".join(psutil.Process(p).cmdline())]


def test_against_a_real_mlflow_server(
    mlflow_server: str, store: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("served")
    with mlflow.start_run() as parent:
        assert cpu2(log_losses).distributed(2) == [0, 1]
    client = mlflow.MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("served")
    child = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )[0]
    assert child.info.status == "FINISHED"
    assert len(client.get_metric_history(child.info.run_id, "loss")) == 4
    assert sorted(a.path for a in client.list_artifacts(child.info.run_id, "logs")) == [
        "logs/rank_0.txt",
        "logs/rank_1.txt",
    ]
    url = f"{mlflow_server}/#/experiments/{experiment.experiment_id}/runs/{child.info.run_id}"
    assert url in capfd.readouterr().err


@pytest.mark.slow
def test_system_metrics_of_the_node_are_logged(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_SYSTEM_METRICS_SECONDS", "0.5")

    def busy() -> None:
        time.sleep(3)

    cpu2(busy).distributed()
    metrics = only_run(mlflow.MlflowClient(store)).data.metrics
    assert any(key.startswith("system/") and "cpu_utilization" in key for key in metrics), sorted(metrics)


@pytest.mark.slow
def test_a_function_that_switches_experiments_gets_a_clear_message(store: str) -> None:
    def switch() -> None:
        import mlflow

        mlflow.set_experiment("inside-the-function")
        mlflow.log_metric("x", 1.0)

    with pytest.raises(Exception, match=r"(?s)Hint: the function chose another MLflow experiment.*set_experiment"):
        cpu2(switch).distributed()
    assert only_run(mlflow.MlflowClient(store)).info.status == "FAILED"


def test_a_notebook_names_its_experiment_where_jupyter_says_which_notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air._tracking.call_run import notebook_or_script_name

    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/projects/Fine Tune LLM.ipynb")
    assert notebook_or_script_name() == "Fine Tune LLM"


def test_a_serialization_failure_is_reported_even_when_the_store_is_unreachable(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    lock = threading.Lock()
    with pytest.raises(SerializationError):
        cpu2(lambda: lock.locked()).distributed()
