"""``@distributed(remote=True)`` on the session's two-node loopback Ray cluster: 4 CPU ranks over gloo, 2 per node."""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import cloudpickle
import pytest

from ray_test_support import LOOPBACK_ADDRESSES, assert_nothing_left, cluster_processes, wait_until
from databricks.air import distributed
from databricks.air.exceptions import DistributedExecutionError, GPUValidationError, LocalExecutionTimeoutError

# Ranks on Ray cannot import this test module (only the job's working directory is on their path): ship the
# functions by value, as a notebook's functions are.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

RANKS = 4
CONTRACT = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


# --- one successful call, looked at from several sides ---------------------------------------------------------------


def train(scale: float) -> Dict[str, Any]:
    import os

    import torch
    import torch.distributed as dist

    import air_ray_helper  # only in the driver's working directory, which Ray shipped

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    dist.destroy_process_group()
    rank, node = int(os.environ["RANK"]), int(os.environ["NODE_RANK"])
    if rank in (1, 2):  # one rank of each node (importing MLflow in every rank costs seconds of CPU)
        import mlflow

        mlflow.log_metric(f"rank_{rank}_node", float(node))
    print(f"rank {rank} says hello")
    return {
        "sum": total.item() * scale,
        "env": {key: os.environ[key] for key in CONTRACT},
        "helper": air_ray_helper.SHIPPED,
    }


@pytest.fixture(scope="module")
def successful_call(connected: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """One call of 4 ranks with MLflow tracking into a SQLite store, run once for the tests below."""
    import mlflow

    store = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABRICKS_AIR_MLFLOW", "1")
        patch.setenv("DATABRICKS_AIR_SYSTEM_METRICS", "0")
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
        patch.setenv("MLFLOW_EXPERIMENT_NAME", "ray-remote-tests")
        patch.setenv("DATABRICKS_AIR_LOG_DIR", str(tmp_path_factory.mktemp("logs")))
        function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(train)
        values = function.distributed(10.0)
        client = mlflow.MlflowClient(f"sqlite:///{store}")
        experiment = client.get_experiment_by_name("ray-remote-tests")
        (run,) = client.search_runs([experiment.experiment_id])
        yield {"values": values, "run": run, "log_dir": function.last_log_dir}


@pytest.mark.slow
def test_every_rank_returns_in_rank_order_after_a_gloo_all_reduce(successful_call: Dict[str, Any]) -> None:
    values = successful_call["values"]
    assert [v["sum"] for v in values] == [60.0] * RANKS  # (0 + 1 + 2 + 3) * 10
    assert [v["env"]["RANK"] for v in values] == ["0", "1", "2", "3"]


def test_the_ranks_span_both_nodes_with_the_torchrun_contract(successful_call: Dict[str, Any]) -> None:
    envs = [v["env"] for v in successful_call["values"]]
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}  # rank 0's node
    assert len({e["MASTER_PORT"] for e in envs}) == 1


def test_modules_of_the_drivers_working_directory_import_in_every_rank(successful_call: Dict[str, Any]) -> None:
    assert {v["helper"] for v in successful_call["values"]} == {"from the working directory"}


def test_ranks_on_both_nodes_log_into_the_calls_mlflow_run(successful_call: Dict[str, Any]) -> None:
    run = successful_call["run"]
    assert run.info.status == "FINISHED"
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("rank_")} == {
        "rank_1_node": 0.0,
        "rank_2_node": 1.0,
    }
    assert run.data.params["accelerator_type"] == "CPU"


def test_every_ranks_output_is_in_its_log_file(successful_call: Dict[str, Any]) -> None:
    log_dir = Path(successful_call["log_dir"])
    for rank in range(RANKS):
        assert f"rank {rank} says hello" in (log_dir / f"rank_{rank}.txt").read_text()


def test_a_call_leaves_nothing_on_the_cluster(successful_call: Dict[str, Any]) -> None:
    assert_nothing_left()


def test_no_ray_process_of_the_cluster_listens_beyond_loopback(successful_call: Dict[str, Any], connected: Any) -> None:
    import psutil

    processes = cluster_processes(connected) + [psutil.Process()]  # the nodes, their workers, and this driver
    assert len(processes) > 5
    listening = []
    for process in processes:
        try:
            listening += [
                (process.pid, process.name(), c.laddr.ip, c.laddr.port)
                for c in process.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN
            ]
        except psutil.NoSuchProcess:
            continue
    assert listening, "the cluster listens somewhere"
    assert [entry for entry in listening if entry[2] not in LOOPBACK_ADDRESSES] == []


# --- failures, timeout, interrupt ------------------------------------------------------------------------------------


def fail_on_rank_2() -> None:
    import os
    import time

    if os.environ["RANK"] == "2":
        raise KeyError("missing shard on rank 2")
    time.sleep(120)


@pytest.mark.slow
def test_a_failing_rank_raises_its_own_exception_with_every_ranks_fate(connected: Any) -> None:
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(fail_on_rank_2)
    with pytest.raises(KeyError) as caught:
        function.distributed()
    error = caught.value
    assert isinstance(error, DistributedExecutionError) and error.rank == 2
    assert "missing shard on rank 2" in error.remote_traceback
    report = str(error)
    assert "rank 2 of 4 raised KeyError" in report
    assert "rank 2: failed first (root cause), exit code 1" in report
    assert "rank 0: stopped by the launcher, killed by SIGTERM" in report
    assert_nothing_left()


def sleep_long() -> None:
    import time

    time.sleep(300)


@pytest.mark.slow
def test_the_timeout_stops_every_rank(connected: Any) -> None:
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=15)(sleep_long)
    started = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError, match="timeout of 15 s"):
        function.distributed()
    assert time.monotonic() - started < 60
    assert_nothing_left()


def report_and_sleep(started_dir: str) -> None:
    import os
    import time

    open(os.path.join(started_dir, os.environ["RANK"]), "w").close()
    time.sleep(300)


@pytest.mark.slow
def test_an_interrupt_in_the_caller_stops_every_rank_and_frees_the_cluster(connected: Any, tmp_path: Path) -> None:
    started = tmp_path / "started"
    started.mkdir()
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(report_and_sleep)

    def interrupt_once_all_ranks_run() -> None:
        if wait_until(lambda: len(os.listdir(started)) == RANKS, 120):
            _thread.interrupt_main()  # what Ctrl-C or a notebook's interrupt button does

    threading.Thread(target=interrupt_once_all_ranks_run, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        function.distributed(str(started))
    assert len(os.listdir(started)) == RANKS
    assert_nothing_left()


@pytest.mark.slow
def test_a_rank_whose_ray_actor_dies_fails_the_call_and_takes_its_rank_with_it(connected: Any, tmp_path: Path) -> None:
    import psutil

    started = tmp_path / "started"
    started.mkdir()
    function = distributed(num_accelerators=RANKS, accelerator_type="CPU", remote=True, timeout=300)(report_and_sleep)
    killed: Dict[str, int] = {}

    def kill_the_host_of_rank_3() -> None:
        if not wait_until(lambda: len(os.listdir(started)) == RANKS, 120):
            return
        for process in psutil.process_iter():
            try:
                if process.environ().get("RANK") == "3" and process.parent().name().startswith("ray::RankHost"):
                    killed["rank"], killed["host"] = process.pid, process.parent().pid
                    process.parent().kill()  # as if its node were lost
                    return
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, AttributeError):
                continue

    threading.Thread(target=kill_the_host_of_rank_3, daemon=True).start()
    with pytest.raises(DistributedExecutionError) as caught:
        function.distributed(str(started))
    assert killed, "no rank host was found to kill"
    assert caught.value.rank == 3
    assert "rank 3 of 4: its Ray actor on 127.0.0.1 died" in str(caught.value)
    assert not psutil.pid_exists(killed["rank"]) or psutil.Process(killed["rank"]).status() == psutil.STATUS_ZOMBIE
    assert_nothing_left()


# --- what the cluster cannot do --------------------------------------------------------------------------------------


def test_more_ranks_than_the_cluster_has_fail_at_once_naming_its_resources(connected: Any) -> None:
    function = distributed(num_accelerators=5, accelerator_type="CPU", remote=True)(sleep_long)
    started = time.monotonic()
    with pytest.raises(GPUValidationError) as caught:
        function.distributed()
    assert time.monotonic() - started < 10
    assert "has 4 CPU(s) in all" in str(caught.value)
    assert "2 node(s): 127.0.0.1 (CPU 2), 127.0.0.1 (CPU 2)" in str(caught.value)


@pytest.mark.slow
def test_a_busy_cluster_is_waited_for_within_the_timeout(
    connected: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    from databricks.air._ray import placement

    monkeypatch.setattr(placement, "NOTE_AFTER_SECONDS", 1.0)
    holder = placement_group([{"CPU": 1}] * 3, strategy="SPREAD")  # other work holds 3 of the 4 CPUs
    assert holder.wait(60)
    try:
        function = distributed(num_accelerators=2, accelerator_type="CPU", remote=True, timeout=4)(sleep_long)
        with pytest.raises(LocalExecutionTimeoutError, match="did not free 2 CPU"):
            function.distributed()
    finally:
        remove_placement_group(holder)
    note = "waiting for the Ray cluster to free 2 CPU(s) for sleep_long (other work holds them)"
    assert note in capsys.readouterr().err
    assert_nothing_left()


def test_a_gpu_model_the_cluster_lacks_fails_at_once(connected: Any) -> None:
    function = distributed(num_accelerators=1, accelerator_type="GPU_1xA10", remote=True)(sleep_long)
    with pytest.raises(GPUValidationError, match="accelerator_type:A10"):
        function.distributed()
