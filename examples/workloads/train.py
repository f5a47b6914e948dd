"""DDP training of a small regression model, one process per accelerator, as ``workload.yaml``'s torchrun starts it.

Reads its hyperparameters from ``HYPERPARAMETERS_PATH`` (the workload's ``parameters``); rank 0 logs the loss,
averaged over the ranks, to the attempt's MLflow run (``MLFLOW_RUN_ID``). NCCL on GPUs, gloo on CPU ranks.
"""

import os

import torch
import torch.distributed as dist
import yaml
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    with open(os.environ["HYPERPARAMETERS_PATH"], encoding="utf-8") as stream:
        params = yaml.safe_load(stream)
    steps, lr, batch_size = int(params["steps"]), float(params["lr"]), int(params["batch_size"])

    on_gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world_size, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)

    torch.manual_seed(0)  # the same initial weights on every rank
    model = DistributedDataParallel(torch.nn.Linear(16, 1).to(device), device_ids=[local_rank] if on_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(rank)  # each rank its own batches
    weights = torch.arange(16, dtype=torch.float32) / 16

    tracked = rank == 0 and "MLFLOW_RUN_ID" in os.environ
    if tracked:
        import mlflow  # only rank 0 logs, so only rank 0 pays for the import

    for step in range(steps):
        x = torch.randn(batch_size, 16, generator=data)
        y = x @ weights + 0.01 * torch.randn(batch_size, generator=data)
        loss = torch.nn.functional.mse_loss(model(x.to(device)).squeeze(-1), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world_size
        if rank == 0:
            print(f"step {step} loss {mean.item():.4f}", flush=True)
            if tracked:
                mlflow.log_metric("loss", mean.item(), step=step)

    dist.barrier()  # every rank is done with the group before any rank tears it down
    del model  # the model goes before its process group: DDP freed after it can hang gloo's teardown
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
