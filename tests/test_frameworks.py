"""DDP, FSDP2 and DeepSpeed ZeRO-2 run under ``@distributed`` unchanged: the examples, on 2 CPU ranks over gloo.

Each example script runs as a user runs it (``python examples/train_<x>.py`` in a fresh working directory, CPU
ranks asked for through ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU``); its last line is the list of per-rank results,
which must show a falling loss and identical weights on every rank. The DDP example runs as its notebook, in a real
Jupyter kernel (its last cell is the script's ``main``).
The same examples run on every GPU of a node through ``bench/gpu_check.sh`` and ``tests/test_gpu.py``.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from typing import Any

import pytest

from process_helpers import processes_with_marker, wait_until
from example_support import EXAMPLES, assert_converged_and_agree, load_example_module, run_example
from kernel_support import kernel_env, kernel_specs, notebook_client  # noqa: F401 (kernel_specs: a fixture)


# Loading in this one process is the point; torch warns that it assumes so even when asked with no_dist=True.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_fsdp_example_shards_the_model_and_its_checkpoint_restores_it(tmp_path: Path) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    results = run_example("train_fsdp", tmp_path)
    assert_converged_and_agree(results)
    # Each rank held half of the weights, and the restored model computes exactly the trained model's loss.
    fractions = [r["shard_fraction"] for r in results]
    assert sum(fractions) == pytest.approx(1.0) and all(0.45 < f < 0.55 for f in fractions)
    assert all(r["restored_loss"] == r["trained_loss"] for r in results)

    folder = tmp_path / "checkpoints" / "train_fsdp"
    assert sorted(p.name for p in folder.iterdir()) == [".checksums.json", ".metadata", "__0_0.distcp", "__1_0.distcp"]
    # The sharded checkpoint loads, unsharded, into a plain model in this one process: it holds the full weights.
    example = load_example_module("train_fsdp")
    model = example.ResidualMLP(width=128, depth=4)
    state = {"model": model.state_dict()}
    dcp.load(state, storage_reader=dcp.FileSystemReader(str(folder)), no_dist=True)
    loaded = sum(float(t.double().abs().sum()) for t in state["model"].values())
    assert loaded == pytest.approx(results[0]["checksum"], rel=1e-9)
    assert isinstance(model.project_in.weight, torch.nn.Parameter)


@pytest.mark.slow
def test_deepspeed_example_trains_with_zero_stage_2(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed", reason="install the 'deepspeed' extra (see the README)")
    results = run_example("train_deepspeed", tmp_path)
    assert_converged_and_agree(results)
    assert all(r["zero_stage"] == 2 for r in results)


@pytest.mark.slow
def test_ddp_notebook_converges_in_a_real_kernel_with_identical_replicas(
    tmp_path: Path,
    kernel_specs: Any,
) -> None:
    import nbformat
    import torch

    marker = uuid.uuid4().hex
    nb = nbformat.read(EXAMPLES / "train_ddp.ipynb", as_version=4)
    client = notebook_client(nb, tmp_path, kernel_specs)
    client.execute(env=kernel_env(tmp_path, marker, DATABRICKS_AIR_ACCELERATOR_TYPE="CPU"), cleanup_kc=True)
    last = [cell for cell in nb.cells if cell.cell_type == "code"][-1]
    assert not [o for o in last.outputs if o["output_type"] == "error"], last.outputs
    stdout = "".join(o.get("text", "") for o in last.outputs if o.get("name") == "stdout")
    assert "epoch 0: loss" in stdout  # rank 0's output, in the cell, as it trained
    assert "weights identical on every rank: True" in stdout
    results = ast.literal_eval(stdout.strip().splitlines()[-1])
    assert [(r["rank"], r["world_size"], r["device"]) for r in results] == [(0, 2, "cpu"), (1, 2, "cpu")]
    assert_converged_and_agree(results)

    # Rank 0 saved the unwrapped module (no "module." prefix) with the trained weights.
    state = torch.load(tmp_path / "checkpoints" / "train_ddp.pt", weights_only=True)
    assert sorted(state) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]
    assert sum(float(t.double().abs().sum()) for t in state.values()) == pytest.approx(results[0]["checksum"])
    # nbclient has shut the kernel down; its rank server follows it.
    assert wait_until(lambda: not processes_with_marker(marker), timeout=30), [
        (p.pid, p.cmdline()) for p in processes_with_marker(marker)
    ]
