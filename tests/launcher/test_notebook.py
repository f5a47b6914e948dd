"""``@distributed`` in a real Jupyter kernel: output in the cell, the interrupt button, a dead kernel, the example.

Every test writes an ``.ipynb`` into its ``tmp_path`` and runs it with nbclient in an ipykernel started from this
interpreter (``sys.executable``), with the kernel's working directory set to ``tmp_path``. The kernel's environment
carries a unique ``AIR_TEST_MARKER``, which every process below it inherits (the rank server, the ranks, what the
ranks start), so leftovers can be found with :func:`process_helpers.processes_with_marker`.

MLflow tracking is turned off in the kernel (``DATABRICKS_AIR_MLFLOW=0``) except where a test is about it: the
quickstart and the interrupt test track into MLflow's default store, a SQLite file in the kernel's working directory.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import nbformat
import psutil
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

from kernel_support import (  # noqa: F401 (kernel_specs and marker: fixtures)
    kernel_specs,
    marker,
    kernel_env,
    write_notebook,
    notebook_client,
    kernel_pid,
    rank_servers,
    live_children,
    texts,
    all_output_text,
    until,
    run_in_kernel,
)
from process_helpers import processes_with_marker, wait_until

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.ipynb"


# --- cells ---------------------------------------------------------------------------------------------------------

IMPORTS = """
    import os
    import sys

    import torch
    import torch.nn as nn

    from databricks.air import distributed

    print(sys.executable)
"""

MODEL = """
    class TinyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.net(x)
"""

TRAIN = """
    @distributed(num_accelerators=2, accelerator_type="CPU")
    def train(steps):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        tracking = bool(os.environ.get("MLFLOW_RUN_ID"))  # read once: MLflow unsets it at the first log
        torch.manual_seed(0)
        model = DDP(TinyNet())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        generator = torch.Generator().manual_seed(rank)
        x = torch.randn(64, 8, generator=generator)
        y = torch.randn(64, 1, generator=generator)
        for step in range(steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            print(f"step {step} loss {loss.item():.4f} (rank {rank})", flush=True)
            if tracking:
                import mlflow

                mlflow.log_metric(f"loss_rank{rank}", loss.item(), step=step)
        dist.destroy_process_group()
        return rank, round(loss.item(), 4)
"""

CALL = """
    result = train.distributed(5)
    print("RESULT", result)
"""

HOLD = """
    @distributed(num_accelerators=2, accelerator_type="CPU")
    def hold(pid_dir, seconds):
        import subprocess
        import time
        from pathlib import Path

        # A grandchild, as a DataLoader worker would be; both pids are noted for the test.
        child = subprocess.Popen(["sleep", str(seconds)])
        Path(pid_dir, "rank" + os.environ["RANK"]).write_text(f"{os.getpid()} {child.pid}")
        print("ready", flush=True)
        time.sleep(seconds)
"""

NEXT_CALL = """
    print("NEXT", distributed(num_accelerators=2, accelerator_type="CPU")(lambda: os.environ["RANK"]).distributed())
"""


def noted_pids(pid_dir: Path) -> List[int]:
    return [int(p) for f in pid_dir.iterdir() for p in f.read_text().split()]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- tests ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_rank_0_prints_show_in_the_calling_cell_in_order_and_rank_1_prints_do_not(
    tmp_path: Path, marker: str, kernel_specs: KernelSpecManager
) -> None:
    path = tmp_path / "train.ipynb"
    nb = write_notebook(path, IMPORTS, MODEL, TRAIN, CALL)
    client = notebook_client(nb, tmp_path, kernel_specs)
    client.execute(env=kernel_env(tmp_path, marker, DATABRICKS_AIR_MLFLOW="1"), cleanup_kc=True)
    nbformat.write(nb, path)  # executed, for a look after a failure

    imports, model, train, call = nb.cells
    assert texts(imports, "stdout").strip() == sys.executable  # the kernel runs this interpreter

    # The result, in rank order.
    result = re.search(r"^RESULT (.*)$", texts(call, "stdout"), re.MULTILINE)
    assert result, call.outputs
    values = ast.literal_eval(result.group(1))  # a list of (rank, loss) tuples, as printed
    assert [rank for rank, _ in values] == [0, 1]
    assert all(isinstance(loss, float) and loss >= 0 for _, loss in values)

    # Rank 0's prints, in the calling cell, in order, before the cell's own print of the result.
    stdout = texts(call, "stdout")
    steps = re.findall(r"^step (\d+) loss ([\d.]+) \(rank (\d+)\)$", stdout, re.MULTILINE)
    assert [int(step) for step, _, _ in steps] == [0, 1, 2, 3, 4], stdout
    assert {rank for _, _, rank in steps} == {"0"}
    assert float(steps[-1][1]) == values[0][1]  # the last loss printed is the loss rank 0 returned
    assert stdout.index("step 4 loss") < stdout.index("RESULT")
    assert "databricks.air: running train on 2 CPU rank(s)" in texts(call, "stderr")
    for cell in (imports, model, train):
        assert "step 0 loss" not in texts(cell, "stdout")

    # The run link, once, as HTML in the calling cell; every rank's metrics are in that one run.
    links = [o for o in call.outputs if o["output_type"] == "display_data" and "text/html" in o.get("data", {})]
    assert len(links) == 1 and "MLflow run" in links[0]["data"]["text/html"]
    import mlflow

    store = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = links[0]["metadata"]["databricks.air"]["run_id"]
    for rank in (0, 1):
        assert [m.step for m in store.get_metric_history(run_id, f"loss_rank{rank}")] == [0, 1, 2, 3, 4]
    assert store.get_run(run_id).info.status == "FINISHED"

    # Rank 1 printed too, but only into its log file.
    assert "(rank 1)" not in all_output_text(nb)
    rank_1_logs = list((tmp_path / "logs").rglob("rank_1.txt"))
    assert len(rank_1_logs) == 1
    assert "step 4 loss" in rank_1_logs[0].read_text() and "(rank 1)" in rank_1_logs[0].read_text()

    # The kernel has been shut down; nothing it started is left.
    assert wait_until(lambda: not processes_with_marker(marker), 10), processes_with_marker(marker)


@pytest.mark.slow
def test_interrupting_the_kernel_stops_every_rank_and_the_next_cell_runs(
    tmp_path: Path, marker: str, kernel_specs: KernelSpecManager
) -> None:
    path = tmp_path / "interrupt.ipynb"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    nb = write_notebook(path, IMPORTS, HOLD, f"hold.distributed({str(pid_dir)!r}, 60)", NEXT_CALL)
    imports, hold, held, next_call = nb.cells
    client = notebook_client(nb, tmp_path, kernel_specs)
    timings: Dict[str, float] = {}

    async def scenario(client: NotebookClient) -> None:
        await client.async_execute_cell(imports, 0)
        await client.async_execute_cell(hold, 1)
        kernel = psutil.Process(kernel_pid(client))

        call = asyncio.ensure_future(client.async_execute_cell(held, 2))
        assert await until(lambda: "ready" in texts(held, "stdout") or call.done(), 60), held.outputs
        assert not call.done(), call.exception() or held.outputs
        assert await until(lambda: len(list(pid_dir.iterdir())) == 2, 30), "rank 1 did not start"
        servers = rank_servers(kernel)
        assert len(servers) == 1, kernel.children()
        server = servers[0]
        pids = noted_pids(pid_dir)
        assert all(alive(pid) for pid in pids)

        await client.km.interrupt_kernel()  # what the notebook's interrupt button does
        interrupted = time.monotonic()
        with pytest.raises(CellExecutionError) as caught:
            await asyncio.wait_for(call, 30)
        timings["interrupt to reply"] = time.monotonic() - interrupted
        assert caught.value.ename == "KeyboardInterrupt"
        errors = [o for o in held.outputs if o["output_type"] == "error"]
        assert [e["ename"] for e in errors] == ["KeyboardInterrupt"]

        # No rank (nor what a rank started) survives; the kernel and its rank server do, by design.
        def survivors() -> List[psutil.Process]:
            return [p for p in processes_with_marker(marker) if p.pid not in (kernel.pid, server.pid)]

        assert await until(lambda: not survivors(), interrupted + 5 - time.monotonic()), survivors()
        assert not any(alive(pid) for pid in pids)
        assert server.is_running() and live_children(server) == []

        # The next call in the same kernel works.
        started = time.monotonic()
        await client.async_execute_cell(next_call, 3)
        timings["next call"] = time.monotonic() - started
        assert "NEXT ['0', '1']" in texts(next_call, "stdout")

    run_in_kernel(client, kernel_env(tmp_path, marker, DATABRICKS_AIR_MLFLOW="1"), scenario)
    nbformat.write(nb, path)
    print("timings:", {k: round(v, 2) for k, v in timings.items()})
    # The interrupted call's run is KILLED; the next call's run FINISHED.
    import mlflow

    store = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = store.search_runs([e.experiment_id for e in store.search_experiments()], order_by=["start_time ASC"])
    assert [r.info.status for r in runs] == ["KILLED", "FINISHED"]


@pytest.mark.slow
def test_when_the_kernel_is_killed_every_process_it_started_is_gone_within_5_s(
    tmp_path: Path, marker: str, kernel_specs: KernelSpecManager
) -> None:
    path = tmp_path / "killed.ipynb"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    nb = write_notebook(path, IMPORTS, HOLD, f"hold.distributed({str(pid_dir)!r}, 300)")
    imports, hold, held = nb.cells
    client = notebook_client(nb, tmp_path, kernel_specs)
    gone_after: Optional[float] = None

    async def scenario(client: NotebookClient) -> None:
        nonlocal gone_after
        await client.async_execute_cell(imports, 0)
        await client.async_execute_cell(hold, 1)
        pid = kernel_pid(client)

        call = asyncio.ensure_future(client.async_execute_cell(held, 2))
        assert await until(lambda: "ready" in texts(held, "stdout") or call.done(), 60), held.outputs
        assert not call.done(), call.exception() or held.outputs
        assert await until(lambda: len(list(pid_dir.iterdir())) == 2, 30), "rank 1 did not start"
        # The kernel, the rank server, the rendezvous store, 2 ranks and their 2 sleeps.
        assert len(processes_with_marker(marker)) >= 6, processes_with_marker(marker)

        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        assert await until(lambda: not processes_with_marker(marker), 5), processes_with_marker(marker)
        gone_after = time.monotonic() - killed
        with pytest.raises(DeadKernelError):
            await asyncio.wait_for(call, 30)

    run_in_kernel(client, kernel_env(tmp_path, marker), scenario)
    assert not any(alive(pid) for pid in noted_pids(pid_dir))
    print(f"every process gone {gone_after:.2f} s after the kernel was killed")


@pytest.mark.slow
def test_the_quickstart_notebook_runs_on_two_cpu_ranks(
    tmp_path: Path, marker: str, kernel_specs: KernelSpecManager
) -> None:
    path = tmp_path / QUICKSTART.name
    shutil.copy(QUICKSTART, path)
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    committed = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert committed and all(not cell.outputs and cell.execution_count is None for cell in committed)

    # Tracking on, into MLflow's default store: sqlite:///mlflow.db in the kernel's working directory.
    env = kernel_env(tmp_path, marker, DATABRICKS_AIR_ACCELERATOR_TYPE="CPU", DATABRICKS_AIR_MLFLOW="1")
    client = notebook_client(nb, tmp_path, kernel_specs)
    client.execute(env=env, cleanup_kc=True)
    nbformat.write(nb, path)

    last = [cell for cell in nb.cells if cell.cell_type == "code"][-1]
    assert not [o for o in last.outputs if o["output_type"] == "error"]
    lines = re.findall(r"^rank (\d+) on (\S+): final loss ([\d.]+)$", texts(last, "stdout"), re.MULTILINE)
    assert [(rank, device) for rank, device, _ in lines] == [("0", "cpu"), ("1", "cpu")], last.outputs
    assert re.findall(r"^epoch (\d+): mean loss", texts(last, "stdout"), re.MULTILINE) == ["0", "1", "2"]
    # The run link shows once, as HTML, in the calling cell; rank 0's losses are in the call's run.
    links = [o for o in last.outputs if o["output_type"] == "display_data" and "text/html" in o.get("data", {})]
    assert len(links) == 1 and "MLflow run" in links[0]["data"]["text/html"]
    run_id = links[0]["metadata"]["databricks.air"]["run_id"]
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run_id, "loss")]
    assert steps == list(range(48))  # 3 epochs x 16 batches of rank 0's half of 2048 samples: every step, once
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name in ("quickstart", "Default")
    assert wait_until(lambda: not processes_with_marker(marker), 10), processes_with_marker(marker)
