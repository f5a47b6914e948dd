"""End to end: a Spark TorchDistributor notebook, migrated by ``air-migrate``, runs in a real Jupyter kernel.

The notebook is what a Databricks user has: imports, a model and a training function in cells of their own, and, in
a later cell, ``TorchDistributor(num_processes=2, use_gpu=False).run(train, ...)`` whose value is used. pyspark is
not installed here, so only the migrated notebook can run: it must hold no pyspark left, run its function on 2 CPU
ranks over gloo through ``@distributed``, and give the cell the value ``run`` gave, rank 0's.

The kernel is run as ``tests/launcher/test_notebook.py`` runs it, with the helpers of ``tests/kernel_support.py``.
"""

from __future__ import annotations

import pytest

import ast
import re
import textwrap
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.cli import main
from process_helpers import processes_with_marker, wait_until
from kernel_support import kernel_env, kernel_specs, marker, notebook_client, texts  # noqa: F401 (fixtures)

CELLS = [
    """
    import os

    import torch
    import torch.nn as nn
    from pyspark.ml.torch.distributor import TorchDistributor
    """,
    """
    class TinyNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, x):
            return self.net(x)
    """,
    """
    # One training run, on every rank.
    def train(steps):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        torch.manual_seed(0)
        model = DDP(TinyNet())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        generator = torch.Generator().manual_seed(rank)
        x, y = torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator)
        for _ in range(steps):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        dist.destroy_process_group()
        return {"rank": rank, "world_size": int(os.environ["WORLD_SIZE"]), "loss": round(loss.item(), 4)}
    """,
    """
    distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
    """,
    """
    result = distributor.run(train, 5)
    print("RESULT", result)
    """,
]


@pytest.mark.slow
def test_a_migrated_torch_distributor_notebook_runs_and_gives_rank_zeros_value(
    tmp_path: Path,
    marker: str,
    kernel_specs: KernelSpecManager,
) -> None:
    path = tmp_path / "train_spark.ipynb"
    cells = [new_markdown_cell("# Training with TorchDistributor")]
    cells += [new_code_cell(textwrap.dedent(source).strip()) for source in CELLS]
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, path)

    assert main(["--check", str(path)]) == 1
    assert main([str(path)]) == 0
    migrated = nbformat.read(path, as_version=4)
    sources = [cell.source for cell in migrated.cells if cell.cell_type == "code"]
    assert not any(re.search(r"pyspark|TorchDistributor", source) for source in sources), sources
    assert sources[2].startswith(
        "# One training run, on every rank.\n@distributed(num_accelerators=2, "
        'accelerator_type="CPU", timeout=None)\ndef train(steps):\n'
    )
    assert sources[4] == 'result = train.distributed(5)[0]\nprint("RESULT", result)'
    assert main(["--check", str(path)]) == 0  # nothing left to migrate

    client = notebook_client(migrated, tmp_path, kernel_specs)
    client.execute(env=kernel_env(tmp_path, marker), cleanup_kc=True)
    nbformat.write(migrated, path)  # executed, for a look after a failure

    errors = [
        o for cell in migrated.cells if cell.cell_type == "code" for o in cell.outputs if o["output_type"] == "error"
    ]
    assert not errors, errors
    printed = re.search(r"^RESULT (.*)$", texts(migrated.cells[-1], "stdout"), re.MULTILINE)
    assert printed, migrated.cells[-1].outputs
    value = ast.literal_eval(printed.group(1))
    assert value["rank"] == 0 and value["world_size"] == 2  # rank 0's own value, as TorchDistributor.run gave
    assert isinstance(value["loss"], float) and value["loss"] >= 0
    assert wait_until(lambda: not processes_with_marker(marker), 10), processes_with_marker(marker)
