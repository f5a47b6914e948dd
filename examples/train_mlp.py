"""Train a small MLP with DDP on random data, once per GPU (or on 2 CPU ranks), with ``@distributed``.

The complete example from the Databricks ``@distributed`` page, ported to run locally:

    python examples/train_mlp.py                                     # every visible GPU, nccl
    DATABRICKS_AIR_ACCELERATOR_TYPE=CPU python examples/train_mlp.py # 2 CPU ranks, gloo

Without a GPU the script picks the CPU variant by itself. Each call is an MLflow run (in MLflow's default store,
``mlflow.db`` in the working directory, unless ``MLFLOW_TRACKING_URI`` says otherwise); rank 0 logs the mean loss
of every epoch into it, and the call prints how to open it. Differences from the original: every rank builds the
same dataset from a fixed seed (a ``DistributedSampler`` assumes identical datasets on all ranks), and each rank
returns its final loss.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn

from databricks.air import distributed

INPUT_DIM = 32
HIDDEN_DIM = 64
NUM_SAMPLES = 2048
CPU_RANKS = 2


def use_cuda() -> bool:
    """Whether to train on GPUs, decided in the caller.

    An explicit ``DATABRICKS_AIR_ACCELERATOR_TYPE`` wins, so ``=CPU`` forces CPU ranks even on a GPU host. Otherwise
    ``torch.cuda.is_available()`` decides: it only asks the driver for a device count and does not set up torch's CUDA
    state, and the ranks are fresh interpreters rather than forks of this process, so asking here is harmless.
    """
    requested = os.environ.get("DATABRICKS_AIR_ACCELERATOR_TYPE")
    if requested:
        return requested.strip().upper() != "CPU"
    return torch.cuda.is_available()


USE_CUDA = use_cuda()


def _decorator() -> Callable[[Callable[..., Any]], Any]:
    """``@distributed()`` (every visible GPU) on a GPU host, otherwise 2 CPU ranks."""
    if USE_CUDA:
        return distributed()
    return distributed(accelerator_type="CPU", num_accelerators=CPU_RANKS)


def setup(cuda: bool) -> torch.device:
    """Join the process group; return this rank's device."""
    if cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        return torch.device(f"cuda:{local_rank}")
    # Share the cores between CPU ranks instead of letting each rank start one thread per core.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["WORLD_SIZE"])))
    dist.init_process_group("gloo")
    return torch.device("cpu")


def cleanup() -> None:
    dist.destroy_process_group()


class SimpleMLP(nn.Module):
    def __init__(self, input_dim: int = INPUT_DIM, hidden_dim: int = HIDDEN_DIM, output_dim: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(hidden_dim, output_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@_decorator()
def run_train(num_epochs: int, batch_size: int, cuda: bool) -> dict[str, Any]:
    import torch.optim as optim
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    # 1. Join the process group (nccl on GPUs, gloo on CPU ranks).
    device = setup(cuda)
    rank = dist.get_rank()

    # 2. Wrap the model in DDP for data-parallel training.
    torch.manual_seed(0)
    model = SimpleMLP().to(device)
    model = DDP(model, device_ids=[device.index] if cuda else None)

    # 3. Build the dataset inside the function, so it is not pickled with it; same seed on every rank.
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_SAMPLES, INPUT_DIM, generator=generator)
    y = torch.randn(NUM_SAMPLES, 1, generator=generator)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset)
    dataloader = DataLoader(dataset, sampler=sampler, batch_size=batch_size)

    # 4. Training loop.
    optimizer = optim.Adam(model.parameters(), lr=0.001)
    loss_fn = nn.MSELoss()
    epoch_loss = 0.0
    # Tracking is on when the call hands the rank its run; read it once: MLflow unsets MLFLOW_RUN_ID when it
    # attaches to the run at the first log call.
    tracking = bool(os.environ.get("MLFLOW_RUN_ID"))
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)
        model.train()
        totals = torch.zeros(2, device=device)  # sum of per-sample loss, number of samples
        for xb, yb in dataloader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            totals[0] += loss.detach() * xb.size(0)
            totals[1] += xb.size(0)
        epoch_loss = (totals[0] / totals[1]).item()
        dist.all_reduce(totals)  # sum over ranks, for the mean loss over the whole dataset
        if rank == 0:
            mean_loss = (totals[0] / totals[1]).item()
            print(f"epoch {epoch}: mean loss {mean_loss:.4f}", flush=True)
            if tracking:
                import mlflow

                mlflow.log_metric("loss", mean_loss, step=epoch)

    del model  # the model goes before its process group: DDP freed after it can hang gloo's teardown
    cleanup()
    return {"rank": rank, "device": str(device), "final_loss": epoch_loss}


def main() -> None:
    results = run_train.distributed(num_epochs=3, batch_size=64, cuda=USE_CUDA)
    print(results)


if __name__ == "__main__":
    main()
