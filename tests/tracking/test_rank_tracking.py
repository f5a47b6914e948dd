"""The rank side of tracking (``_tracking/rank_side.py``), with real ranks and a real store.

Whatever a function does with MLflow's fluent run stack, its ranks log into the call's run, and only the call ends
it; whatever MLflow logging mode a rank uses, every point it logged is in the run when ``.distributed()`` returns,
also when the rank returns at once, when another rank fails, and at the timeout; per-step metrics are batched by
default; ranks of later calls start with MLflow loaded.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from mlflow_fixtures import only_run, served, store  # noqa: F401 - fixtures (mlflow_server: conftest.py)
from databricks.air import distributed
from databricks.air.exceptions import DistributedExecutionError, LocalExecutionTimeoutError

mlflow = pytest.importorskip("mlflow")

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def history(client: Any, run_id: str, key: str) -> List[Any]:
    return client.get_metric_history(run_id, key)


# --- the call's run survives the fluent run stack -------------------------------------------------------------------


@pytest.mark.slow
def test_a_with_block_then_plain_logging_leave_one_run_with_every_metric(store: str) -> None:
    def block_then_plain() -> str:
        import mlflow

        with mlflow.start_run() as run:
            mlflow.log_metric("inside", 1.0)
        mlflow.log_metric("after", 2.0)
        mlflow.log_param(f"rank_{os.environ['RANK']}", "yes")
        return run.info.run_id

    run_ids = cpu2(block_then_plain).distributed()
    run = only_run(mlflow.MlflowClient(store))
    assert run_ids == [run.info.run_id] * 2
    assert run.info.status == "FINISHED"
    assert {"inside", "after"} <= set(run.data.metrics)
    assert {"rank_0", "rank_1"} <= set(run.data.params)


@pytest.mark.slow
def test_no_rank_ends_the_calls_run(store: str) -> None:
    def end_it_every_way() -> List[str]:
        import mlflow

        client = mlflow.MlflowClient()
        run_id = os.environ["MLFLOW_RUN_ID"]
        mlflow.log_metric("first", 1.0)
        mlflow.end_run()
        seen = [client.get_run(run_id).info.status]
        client.set_terminated(run_id, "FAILED")  # as Lightning's MLFlowLogger does when given the run's id
        seen.append(client.get_run(run_id).info.status)
        mlflow.log_metric("second", 2.0)
        seen.append(mlflow.active_run().info.run_id == run_id)
        return seen

    assert cpu2(end_it_every_way).distributed() == [["RUNNING", "RUNNING", True]] * 2
    run = only_run(mlflow.MlflowClient(store))
    assert run.info.status == "FINISHED"
    assert {"first", "second"} <= set(run.data.metrics)


@pytest.mark.slow
def test_starting_a_run_while_the_calls_run_is_active_returns_it(store: str) -> None:
    def start_inside() -> bool:
        import mlflow

        mlflow.log_metric("before", 1.0)  # the call's run is active now
        with mlflow.start_run(tags={"stage": "fit"}) as run:  # MLflow alone would fail: a run is already active
            mlflow.log_metric("inside", 1.0)
        return run.info.run_id == os.environ["MLFLOW_RUN_ID"]

    assert cpu2(start_inside).distributed() == [True, True]
    run = only_run(mlflow.MlflowClient(store))
    assert run.data.tags["stage"] == "fit" and {"before", "inside"} <= set(run.data.metrics)


@pytest.mark.slow
def test_nested_runs_are_children_of_the_calls_run(store: str) -> None:
    def child_on_rank_0() -> None:
        import mlflow

        mlflow.log_metric("outer", 1.0)
        if os.environ["RANK"] == "0":
            with mlflow.start_run(nested=True, run_name="trial"):
                mlflow.log_metric("trial_loss", 0.5)
        mlflow.log_metric("outer_again", 1.0)

    cpu2(child_on_rank_0).distributed()
    client = mlflow.MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (call,) = [r for r in runs if r.info.run_name.endswith("child_on_rank_0")]
    (child,) = [r for r in runs if r.info.run_name == "trial"]
    assert child.data.tags["mlflow.parentRunId"] == call.info.run_id and child.info.status == "FINISHED"
    assert set(child.data.metrics) == {"trial_loss"}
    assert {"outer", "outer_again"} <= set(call.data.metrics) and "trial_loss" not in call.data.metrics
    assert call.info.status == "FINISHED"


@pytest.mark.slow
def test_a_thread_of_a_rank_logs_into_the_calls_run(store: str) -> None:
    def from_a_thread() -> None:
        import threading

        import mlflow

        mlflow.log_metric("main", 1.0)  # MLflow alone would have used up MLFLOW_RUN_ID here
        worker = threading.Thread(target=mlflow.log_metric, args=("thread", 2.0))
        worker.start()
        worker.join()

    cpu2(from_a_thread).distributed()
    assert {"main", "thread"} <= set(only_run(mlflow.MlflowClient(store)).data.metrics)


transformers = importlib.util.find_spec("transformers")


@pytest.mark.slow
@pytest.mark.skipif(transformers is None, reason="needs transformers")
def test_hf_trainer_reporting_to_mlflow_logs_into_the_calls_run_and_leaves_it_running(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def train(output_dir: str) -> tuple:
        import mlflow
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

        config = GPT2Config(
            n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=16, bos_token_id=0, eos_token_id=0
        )
        model = GPT2LMHeadModel(config)
        data = [{"input_ids": torch.randint(0, 64, (16,)), "labels": torch.randint(0, 64, (16,))} for _ in range(16)]
        args = TrainingArguments(
            output_dir=output_dir,
            max_steps=3,
            per_device_train_batch_size=2,
            logging_steps=1,
            report_to=["mlflow"],
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
        )
        Trainer(model=model, args=args, train_dataset=data).train()
        status = mlflow.MlflowClient().get_run(os.environ["MLFLOW_RUN_ID"]).info.status
        mlflow.log_metric("after_training", 1.0)
        return status, torch.distributed.get_world_size()

    assert (
        distributed(num_accelerators=2, accelerator_type="CPU", timeout=600)(train).distributed(str(tmp_path / "out"))
        == [("RUNNING", 2)] * 2
    )
    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.status == "FINISHED"
    assert {"loss", "train_loss", "after_training"} <= set(run.data.metrics)
    assert len(history(client, run.info.run_id, "loss")) == 3  # rank 0 reports, once per step
    assert run.data.params.get("max_steps") == "3"


# --- nothing lost, in every logging mode ----------------------------------------------------------------------------

MODES: Dict[str, Dict[str, str]] = {
    "default": {},
    "synchronous": {"MLFLOW_ENABLE_ASYNC_LOGGING": "false"},
    "asynchronous": {"MLFLOW_ENABLE_ASYNC_LOGGING": "true", "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "0"},
    "buffered": {"MLFLOW_ENABLE_ASYNC_LOGGING": "true", "MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS": "3"},
}
STEPS = 120


def log_and_return(steps: int) -> str:
    """Log ``steps`` points, a param, a tag and an artifact, and return at once."""
    import mlflow

    rank = int(os.environ["RANK"])
    for step in range(steps):
        mlflow.log_metric("loss", rank + 1.0 / (step + 1), step=step)
    mlflow.log_param(f"param_{rank}", rank)
    mlflow.set_tag(f"tag_{rank}", "set")
    mlflow.log_dict({"rank": rank}, f"rank_{rank}.json")
    return os.environ.get("MLFLOW_ENABLE_ASYNC_LOGGING", "")


def assert_everything_landed(client: Any, experiment: str = "", steps: int = STEPS) -> Any:
    run = only_run(client, experiment)
    points = history(client, run.info.run_id, "loss")
    assert len(points) == 2 * steps, f"{2 * steps - len(points)} of {2 * steps} points lost"
    assert {"param_0", "param_1"} <= set(run.data.params) and {"tag_0", "tag_1"} <= set(run.data.tags)
    assert {"rank_0.json", "rank_1.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    return run


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_point_lands_in_every_logging_mode(store: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in MODES[mode].items():
        monkeypatch.setenv(name, value)
    assert cpu2(log_and_return).distributed(STEPS) == [MODES[mode].get("MLFLOW_ENABLE_ASYNC_LOGGING", "")] * 2
    assert assert_everything_landed(mlflow.MlflowClient(store)).info.status == "FINISHED"


@pytest.mark.slow
def test_a_batch_that_waits_out_sqlites_busy_timeout_is_written_when_the_lock_is_free(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3
    import threading

    from mlflow.store.db import utils as mlflow_db_utils

    class ShortBusyTimeout:
        """MLflow's ``sqlalchemy.sql`` with a busy timeout of 2 s instead of 20 s: the batch fails just as soon."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_sql, name)

        def text(self, statement: str) -> Any:
            return real_sql.text(statement.replace("busy_timeout = 20000", "busy_timeout = 2000"))

    real_sql = mlflow_db_utils.sql
    assert "busy_timeout = 20000" in Path(mlflow_db_utils.__file__).read_text()  # MLflow's pragma, as replaced
    monkeypatch.setattr(mlflow_db_utils, "sql", ShortBusyTimeout())  # the batches are written in this process
    path = store[len("sqlite:///") :]
    locked, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:  # as a long write of another process would (MLflow waits 2 s here, 20 s by default)
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(60)
        connection.execute("COMMIT")
        connection.close()

    def log_while_locked(steps: int, flag: str) -> None:
        import mlflow

        for step in range(steps):
            mlflow.log_metric("loss", int(os.environ["RANK"]) + 1.0 / (step + 1), step=step)
        Path(f"{flag}_{os.environ['RANK']}").touch()
        while not Path(f"{flag}_locked").exists():  # returns while its points wait in MLflow's queue
            time.sleep(0.02)

    flag = Path(path).parent / "logged"
    function = cpu2(log_while_locked)
    holder = threading.Thread(target=hold_the_lock)

    def lock_once_logged() -> None:
        while not all(Path(f"{flag}_{rank}").exists() for rank in (0, 1)):
            time.sleep(0.02)
        holder.start()
        locked.wait(10)
        Path(f"{flag}_locked").touch()
        time.sleep(5)  # past MLflow's busy timeout: the ranks' batches fail once
        release.set()

    watcher = threading.Thread(target=lock_once_logged)
    watcher.start()
    try:
        function.distributed(STEPS, str(flag))
    finally:
        release.set()
        watcher.join()
        holder.join()
    client = mlflow.MlflowClient(store)
    assert len(history(client, only_run(client).info.run_id, "loss")) == 2 * STEPS


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "buffered"])
def test_what_a_rank_logged_lands_when_another_rank_fails(
    store: str, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in MODES[mode].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "20")  # a stopped rank writes within the grace
    flag = tmp_path / "logged"

    def log_then_wait(steps: int, flag: str) -> None:
        import mlflow

        if os.environ["RANK"] == "1":
            while not Path(flag).exists():
                time.sleep(0.02)
            raise ValueError("rank 1 fails")
        for step in range(steps):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        Path(flag).touch()
        time.sleep(60)  # stopped by the launcher while its points wait in MLflow's queue

    with pytest.raises(ValueError, match="rank 1 fails"):
        cpu2(log_then_wait).distributed(STEPS, str(flag))
    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.status == "FAILED"
    assert len(history(client, run.info.run_id, "loss")) == STEPS


def log_then_hang(steps: int) -> None:
    import mlflow
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    for step in range(steps):
        mlflow.log_metric("loss", dist.get_rank() + 1.0 / (step + 1), step=step)
    if dist.get_rank() == 0:  # mismatched collectives: both ranks wait in native code for ever
        dist.barrier()
    else:
        dist.recv(torch.zeros(1), src=0)


@pytest.mark.slow
def test_what_was_logged_before_the_timeout_lands_also_from_ranks_stuck_in_a_collective(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "5")
    with pytest.raises(LocalExecutionTimeoutError):
        distributed(num_accelerators=2, accelerator_type="CPU", timeout=10)(log_then_hang).distributed(STEPS)
    client = mlflow.MlflowClient(store)
    run = only_run(client)
    assert run.info.status == "FAILED"
    assert len(history(client, run.info.run_id, "loss")) == 2 * STEPS


@pytest.mark.slow
def test_every_point_lands_on_a_real_mlflow_server(mlflow_server: str, served: str) -> None:
    assert cpu2(log_and_return).distributed(STEPS) == ["", ""]
    assert assert_everything_landed(mlflow.MlflowClient(mlflow_server), served).info.status == "FINISHED"


@pytest.mark.slow
def test_what_a_rank_logged_lands_on_a_real_mlflow_server_when_another_rank_fails(
    mlflow_server: str, served: str
) -> None:
    def log_then_fail(steps: int) -> None:
        import mlflow
        import torch.distributed as dist

        dist.init_process_group("gloo")
        for step in range(steps):
            mlflow.log_metric("loss", dist.get_rank() + 1.0 / (step + 1), step=step)
        dist.barrier()  # both have logged
        if dist.get_rank() == 1:
            raise ValueError("rank 1 fails")
        time.sleep(60)

    with pytest.raises(ValueError):
        cpu2(log_then_fail).distributed(STEPS)
    client = mlflow.MlflowClient(mlflow_server)
    run = only_run(client, served)
    assert run.info.status == "FAILED" and len(history(client, run.info.run_id, "loss")) == 2 * STEPS


# --- per-step metrics are batched by default, and the user keeps their choice ---------------------------------------


def logging_mode() -> Dict[str, Any]:
    import mlflow

    try:
        mlflow.log_metric("bad key!", 1.0)
        rejected = ""
    except mlflow.exceptions.MlflowException as error:
        rejected = str(error)
    key = f"flushed_{os.environ['RANK']}"
    for step in range(5):
        mlflow.log_metric(key, 1.0, step=step)
    mlflow.flush_async_logging()  # MLflow's own flush writes what the rank queued, whichever queue holds it
    flushed = len(mlflow.MlflowClient().get_metric_history(os.environ["MLFLOW_RUN_ID"], key))
    return {
        "flushed": flushed,
        "batched": mlflow.log_metric("loss", 1.0, step=1) is not None,  # MLflow returns a future when it queues
        "buffered": getattr(sys.modules["databricks.air._tracking.rank_side"]._metrics, "run_id", None)
        == os.environ["MLFLOW_RUN_ID"],  # in the rank's own buffer, not in MLflow's queue (a future per point)
        "through the caller": type(
            getattr(sys.modules["databricks.air._tracking.rank_side"]._metrics, "_write", None)
        ).__name__
        == "RankSender",  # written by the call's writer, not in the rank
        "rejected": rejected,
        "buffering": os.environ.get("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS"),
        "registry": os.environ.get("MLFLOW_REGISTRY_URI"),
    }


@pytest.mark.slow
def test_metrics_are_batched_by_default_and_bad_ones_still_fail_at_the_call(store: str) -> None:
    (mode, _) = cpu2(logging_mode).distributed()
    assert mode["batched"] and mode["buffered"] and mode["through the caller"]
    assert "Names may only contain" in mode["rejected"] and mode["flushed"] == 5
    assert mode["buffering"] == "1" and mode["registry"] == store


@pytest.mark.slow
def test_a_user_who_sets_mlflows_variables_keeps_their_choice(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    monkeypatch.setenv("MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS", "5")
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", store + "?registry")
    (mode, _) = cpu2(logging_mode).distributed()
    assert not mode["batched"] and not mode["buffered"] and "Names may only contain" in mode["rejected"]
    assert mode["flushed"] == 5
    assert mode["buffering"] == "5" and mode["registry"] == store + "?registry"


@pytest.mark.slow
def test_params_stay_synchronous_so_a_conflict_fails_where_it_is_logged(store: str) -> None:
    def conflicting_param() -> None:
        import mlflow

        mlflow.log_metric("loss", 1.0)
        if os.environ["RANK"] == "0":
            mlflow.log_param("lr", 0.1)
            mlflow.log_param("lr", 0.2)

    with pytest.raises(DistributedExecutionError, match="Changing param values is not allowed"):
        cpu2(conflicting_param).distributed()
    client = mlflow.MlflowClient(store)
    assert len(history(client, only_run(client).info.run_id, "loss")) == 2


# --- warm calls stay warm -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_of_a_later_call_start_with_mlflow_and_its_store_loaded(store: str) -> None:
    def loaded() -> List[bool]:
        return [name in sys.modules for name in ("mlflow", "mlflow.store.tracking.sqlalchemy_store")]

    for _ in range(2):  # in a loop: the rank server is never idle for long between the calls
        values = cpu2(loaded).distributed()
    assert values == [[True, True]] * 2


# --- the rank side on its own ---------------------------------------------------------------------------------------


def test_binding_waits_for_the_import_not_for_a_look_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air._tracking.rank_side import _AfterImport

    (tmp_path / "late_module.py").write_text(textwrap.dedent("VALUE = 1\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: List[Any] = []
    finder = _AfterImport("late_module", seen.append)
    sys.meta_path.insert(0, finder)
    try:
        assert importlib.util.find_spec("late_module") is not None  # as libraries ask whether MLflow is installed
        assert seen == [] and finder in sys.meta_path
        import late_module  # noqa: F401

        assert [module.VALUE for module in seen] == [1] and finder not in sys.meta_path
    finally:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        sys.modules.pop("late_module", None)
