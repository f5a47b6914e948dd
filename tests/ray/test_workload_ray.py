"""``air run --backend ray``: a workload file on the session's two-node loopback Ray cluster, one command per node.

Each test submits through the real ``air`` command to the cluster's dashboard (Ray's job submission API) and reads
the run back through the same registry as local runs. The cluster is shared; every test leaves it as it found it.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads"))  # the workload tests' helpers

from ray_test_support import RAY_TMPDIR, live_placement_groups, processes_with_marker, wait_until
from workload_support import air, envelope, events, make_wheel, wait_for, wait_for_end

import yaml

TRAIN = """
import os

import torch
import torch.distributed as dist
import yaml

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
scale = yaml.safe_load(open(os.environ["HYPERPARAMETERS_PATH"]))["scale"]
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on node {os.environ['NODE_RANK']}: "
      f"sum {total.item() * scale:g}", flush=True)
dist.destroy_process_group()
"""
TORCHRUN = """echo "node $NODE_RANK of $NUM_NODES: world $WORLD_SIZE, local $LOCAL_WORLD_SIZE, master $MASTER_ADDR"
test "$(pwd)" = "$CODE_SOURCE_PATH" && test -f train.py
torchrun --nnodes="$NUM_NODES" --node_rank="$NODE_RANK" --nproc_per_node="$LOCAL_WORLD_SIZE" \\
  --master_addr="$MASTER_ADDR" --master_port="$MASTER_PORT" train.py
"""


@pytest.fixture(autouse=True)
def _registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry of the test's own, short retry delays and grace periods, nothing from the network."""
    home = tmp_path / "air-home"
    monkeypatch.setenv("DATABRICKS_AIR_HOME", str(home))
    monkeypatch.setenv("DATABRICKS_AIR_RETRY_DELAY_SECONDS", "0")
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "2")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for name in (
        "DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_EXPERIMENT_ID",
        "MLFLOW_RUN_ID",
        "RAY_ADDRESS",
    ):
        monkeypatch.delenv(name, raising=False)
    return home


def workload(folder: Path, name: str = "workload.yaml", **fields: Any) -> Path:
    document = {
        "experiment_name": "ray-workload",
        "compute": {"accelerator_type": "CPU", "num_accelerators": 2},
        "max_retries": 0,
        **fields,
    }
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def submit(path: Path, dashboard: str, *args: str, env: Dict[str, str] = {}) -> int:
    done = air("run", "-f", str(path), "--backend", "ray", "--address", dashboard, "-o", "json", *args, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    return int(envelope(done)["data"]["run_id"])


def live_node_hosts() -> List[Any]:
    from ray.util.state import list_actors

    return [actor for actor in list_actors(filters=[("state", "!=", "DEAD")]) if actor.class_name == "NodeHost"]


def assert_cluster_as_it_was(marker: str) -> None:
    """No node host, placement group or process of the run is left, and every CPU is free again."""
    import ray

    assert wait_until(lambda: not live_node_hosts(), 60), live_node_hosts()
    assert wait_until(lambda: not live_placement_groups(), 60), live_placement_groups()
    assert wait_until(lambda: not processes_with_marker(marker), 60), processes_with_marker(marker)
    assert wait_until(lambda: ray.available_resources().get("CPU") == ray.cluster_resources().get("CPU"), 30), (
        ray.available_resources(),
        ray.cluster_resources(),
    )


# --- a run across both nodes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torchrun_run(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, Any]]:
    """2 nodes x 2 CPU ranks, torchrun on each node, submitted with the cluster's own address in RAY_ADDRESS (as
    ``remote=True`` takes it) and followed with ``--watch``."""
    folder = tmp_path_factory.mktemp("torchrun")
    (folder / "project").mkdir()
    (folder / "project" / "train.py").write_text(TRAIN)
    path = workload(
        folder,
        compute={"accelerator_type": "CPU", "num_accelerators": 4},
        code_source={"root_path": "project"},
        command=TORCHRUN,
        parameters={"scale": 10},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABRICKS_AIR_HOME", str(folder / "air-home"))
        patch.delenv("RAY_ADDRESS", raising=False)
        watched = air(
            "run",
            "-f",
            str(path),
            "--backend",
            "ray",
            "--nodes",
            "2",
            "--watch",
            "-o",
            "json",
            env={"RAY_ADDRESS": ray_cluster.address},
            timeout=400,
        )
        run_id = int(events(watched)[0]["run_id"])
        yield {
            "watched": watched,
            "run_id": run_id,
            "node_logs": [air("logs", str(run_id), "--node", str(node)).stdout for node in (0, 1)],
            "get": envelope(air("get", str(run_id), "-o", "json"))["data"],
            "listed": envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"],
        }


@pytest.mark.slow
def test_torchrun_on_two_nodes_all_reduces_over_four_ranks(torchrun_run: Dict[str, Any]) -> None:
    watched = torchrun_run["watched"]
    assert watched.returncode == 0, watched.stdout[-3000:] + watched.stderr[-3000:]
    assert envelope(watched)["data"]["status"] == "SUCCESS"
    node_0, node_1 = torchrun_run["node_logs"]
    # Ranks 0-1 on node 0 and 2-3 on node 1, in one process group: the sum over all four ranks, times the scale.
    assert "rank 0 of 4 on node 0: sum 60" in node_0 and "rank 1 of 4 on node 0: sum 60" in node_0
    assert "rank 2 of 4 on node 1: sum 60" in node_1 and "rank 3 of 4 on node 1: sum 60" in node_1
    assert "node 0 of 2: world 4, local 2, master 127.0.0.1" in node_0
    assert "node 1 of 2: world 4, local 2, master 127.0.0.1" in node_1


def test_watch_streams_node_0_and_get_list_show_the_ray_job(torchrun_run: Dict[str, Any], dashboard: str) -> None:
    lines = [e for e in events(torchrun_run["watched"]) if e.get("type") == "LOG"]
    assert lines and {e["node"] for e in lines} == {0}
    assert any("rank 0 of 4 on node 0" in e["line"] for e in lines)
    data = torchrun_run["get"]
    assert data["status"] == "SUCCESS" and data["backend"] == "ray" and data["attempt_number"] == 0
    assert data["dashboard_url"].startswith(f"{dashboard}/#/jobs/air-{torchrun_run['run_id']}-")
    assert [run["run_id"] for run in torchrun_run["listed"]] == [torchrun_run["run_id"]]
    assert torchrun_run["listed"][0]["status"] == "SUCCESS"


# --- failures, retries, cancel, timeout ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_failing_node_stops_the_other_and_every_attempt_is_its_own_mlflow_run(
    dashboard: str, connected: Any, tmp_path: Path
) -> None:
    import mlflow

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    marker = f"air-fail-{uuid.uuid4().hex[:8]}"
    command = (
        'echo "node $NODE_RANK run $MLFLOW_RUN_ID"\n'
        'if [ "$NODE_RANK" = 1 ]; then sleep 1; echo "node 1 gives up" >&2; exit 3; fi\n'
        "trap 'echo \"node 0 was stopped\"; exit 143' TERM\n"
        "sleep 300 & wait"
    )
    path = workload(
        tmp_path,
        command=command,
        max_retries=1,
        env_variables={"AIR_TEST_MARKER": marker},
        experiment_name=f"ray-fail-{marker}",
    )
    run_id = submit(path, dashboard, "--nodes", "2", env={"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": store})
    final = wait_for_end(run_id, timeout=250)  # node 0's sleep 300 is cut short, twice
    assert final.status == "FAILED" and final.attempt_number == 1
    attempts = final.attempt_list
    assert [a.status for a in attempts] == ["FAILED", "FAILED"]
    assert all("node 1: exit code 3" in (a.reason or "") for a in attempts)
    for attempt in attempts:
        node_0 = air("logs", str(run_id), "--retry", str(attempt.number)).stdout
        node_1 = air("logs", str(run_id), "--retry", str(attempt.number), "--node", "1").stdout
        assert "node 0 was stopped" in node_0 and "node 1 gives up" in node_1
        assert f"node 0 run {attempt.mlflow_run_id}" in node_0 and f"node 1 run {attempt.mlflow_run_id}" in node_1
    client = mlflow.MlflowClient(store)
    runs = {attempt.mlflow_run_id: client.get_run(attempt.mlflow_run_id) for attempt in attempts}
    assert len(runs) == 2 and {run.info.status for run in runs.values()} == {"FAILED"}
    assert sorted(run.data.tags["databricks.air.workload.attempt"] for run in runs.values()) == ["0", "1"]
    assert_cluster_as_it_was(marker)


@pytest.mark.slow
def test_cancel_and_timeout_each_free_every_bundle_and_process(dashboard: str, connected: Any, tmp_path: Path) -> None:
    """Two runs at once (2 CPUs each, the cluster has 4): one canceled once its nodes run, one past its timeout."""
    markers = {name: f"air-{name}-{uuid.uuid4().hex[:8]}" for name in ("cancel", "timeout")}
    runs = {}
    for name, marker in markers.items():
        path = workload(
            tmp_path,
            f"{name}.yaml",
            command='echo "node $NODE_RANK started"\nsleep 300',
            env_variables={"AIR_TEST_MARKER": marker},
        )
        runs[name] = submit(
            path,
            dashboard,
            "--nodes",
            "2",
            env={"DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS": "8"} if name == "timeout" else {},
        )
    wait_for(runs["cancel"], lambda s: s.status == "RUNNING" and s.owner.get("attempt"), timeout=120)
    assert wait_until(lambda: len(processes_with_marker(markers["cancel"])) >= 4, 60)  # two hosts, two commands
    canceled = air("cancel", str(runs["cancel"]), "-o", "json")
    assert canceled.returncode == 0, canceled.stdout + canceled.stderr
    assert envelope(canceled)["data"]["cancelled"] == [runs["cancel"]]
    final = wait_for_end(runs["cancel"], timeout=60)
    assert final.status == "CANCELED" and final.latest.status == "CANCELED"
    final = wait_for_end(runs["timeout"], timeout=180)
    assert final.status == "TIMEDOUT" and "ran past its timeout" in (final.message or "")
    assert "ERROR: Script stopped after" in air("logs", str(runs["timeout"]), "--node", "1").stdout
    for marker in markers.values():
        assert_cluster_as_it_was(marker)


@pytest.mark.slow
def test_a_node_count_the_cluster_can_never_hold_fails_at_submission(dashboard: str, tmp_path: Path) -> None:
    path = workload(tmp_path, command="echo never", compute={"accelerator_type": "CPU", "num_accelerators": 3})
    done = air("run", "-f", str(path), "--backend", "ray", "--address", dashboard, "--nodes", "3")
    assert done.returncode == 2
    assert "needs 3 node(s) of 1 CPU(s), each on a Ray node of its own (STRICT_SPREAD)" in done.stderr
    assert "2 node(s): 127.0.0.1 (CPU 2), 127.0.0.1 (CPU 2)" in done.stderr
    too_big = workload(
        tmp_path, "too-big.yaml", command="echo never", compute={"accelerator_type": "CPU", "num_accelerators": 8}
    )
    done = air("run", "-f", str(too_big), "--backend", "ray", "--address", dashboard, "--nodes", "2", "-o", "json")
    assert done.returncode == 2 and "2 node(s) of 4 CPU(s)" in envelope(done)["error"]["message"]
    gpus = workload(
        tmp_path, "gpus.yaml", command="echo never", compute={"accelerator_type": "GPU_8xH100", "num_accelerators": 16}
    )
    done = air("run", "-f", str(gpus), "--backend", "ray", "--address", dashboard)
    assert done.returncode == 2 and "accelerator_type:H100" in done.stderr
    uneven = air("run", "-f", str(path), "--backend", "ray", "--address", dashboard, "--nodes", "2")
    assert uneven.returncode == 2 and "must divide compute.num_accelerators (3)" in uneven.stderr
    assert envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"] == []  # nothing was recorded


# --- environment, code and secrets ---------------------------------------------------------------------------------


# python is Ray's environment for the job; the interpreter of torchrun (the cluster's own) sees the package through
# PYTHONPATH; the token is redacted in the log.
DEPENDENCY_COMMAND = r"""python -c "import airraypkg, sys; print('node', $NODE_RANK, airraypkg.VALUE, 'in', sys.prefix)"
launcher="$(head -1 "$(command -v torchrun)")"
"${launcher#\#!}" -c "import airraypkg; print('torchrun python:', airraypkg.VALUE)"
echo "token $HF_TOKEN"
"""


@pytest.mark.slow
def test_dependencies_come_from_rays_runtime_environment_and_secrets_never_reach_the_cluster_in_clear(
    dashboard: str, tmp_path: Path
) -> None:
    import importlib.util

    from ray.job_submission import JobSubmissionClient

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "airraypkg", "0.2", "VALUE = 'from the wheel'\n")
    (tmp_path / "requirements.txt").write_text("wheels/airraypkg-0.2-py3-none-any.whl\n")
    command = DEPENDENCY_COMMAND
    path = workload(
        tmp_path,
        command=command,
        secrets={"HF_TOKEN": "ml_team/hf_token"},
        environment={"dependencies": ["-r requirements.txt"]},
    )
    broken = workload(
        tmp_path,
        "broken.yaml",
        command="echo never",
        environment={"dependencies": ["numpy", "air-no-such-package==9.9"]},
        max_retries=2,
    )
    failing = submit(broken, dashboard, "--nodes", "2")  # both at once: 2 CPUs each, of the cluster's 4
    run_id = submit(path, dashboard, "--nodes", "2", env={"DATABRICKS_AIR_SECRET_ML_TEAM__HF_TOKEN": secret})
    # While Ray builds the nodes' environments (seconds: a virtualenv and pip each), the run says so.
    wait_for(run_id, lambda s: "installing environment.dependencies on 2 node(s)" in (s.message or ""), timeout=120)
    final = wait_for_end(run_id, timeout=300)
    logs = [air("logs", str(run_id), "--node", str(node)).stdout for node in (0, 1)]
    assert final.status == "SUCCESS", (final.message, logs)
    prefixes = set()
    for node, text in enumerate(logs):
        said = next(line for line in text.splitlines() if line.startswith(f"node {node} from the wheel in "))
        prefixes.add(said.rsplit(" in ", 1)[1])
        assert "torchrun python: from the wheel" in text
        assert "token [REDACTED]" in text and secret not in text
    # Each node's own virtual environment, which Ray built in its runtime resources; nothing in this environment.
    assert len(prefixes) == 2 and all(prefix.startswith(RAY_TMPDIR) for prefix in prefixes), prefixes
    importlib.invalidate_caches()
    assert importlib.util.find_spec("airraypkg") is None
    job_id = final.owner["ray_job_id"]
    client = JobSubmissionClient(dashboard)
    job = client.get_job_info(job_id)
    assert "pip" not in job.runtime_env  # the node hosts' environment only: the supervisor keeps the cluster's
    shown = json.dumps([job.entrypoint, job.metadata, job.runtime_env, job.message], default=str)
    assert secret not in shown and secret not in client.get_job_logs(job_id)
    assert secret not in json.dumps(
        [j.model_dump() if hasattr(j, "model_dump") else str(j) for j in client.list_jobs()], default=str
    )
    on_disk = [str(p) for p in Path(RAY_TMPDIR).rglob("*") if p.is_file() and _holds(p, secret.encode())]
    assert on_disk == []  # not in Ray's logs, its unpacked working directories or anything else it keeps
    # A requirement that cannot be installed fails the run, which says which one, what pip said and what to do.
    broken_run = wait_for_end(failing, timeout=120)
    assert broken_run.status == "FAILED", broken_run.message
    message = broken_run.message or ""
    assert "installing environment.dependencies on node 0 failed" in message, message
    assert [attempt.status for attempt in broken_run.attempt_list] == ["FAILED"]  # not retried: it cannot help
    assert "No matching distribution found for air-no-such-package==9.9" in message, message
    assert "package index" in message and "runtime_env_setup" in message
    shown = envelope(air("get", str(failing), "-o", "json"))["data"]
    assert shown["status"] == "FAILED" and "air-no-such-package==9.9" in json.dumps(shown)


def _holds(path: Path, data: bytes) -> bool:
    try:
        return data in path.read_bytes()
    except OSError:
        return False
