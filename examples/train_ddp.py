"""DistributedDataParallel through ``@distributed``: every GPU of this node, or 2 CPU ranks.

    python examples/train_ddp.py                                      # every visible GPU, nccl
    DATABRICKS_AIR_ACCELERATOR_TYPE=CPU python examples/train_ddp.py  # 2 CPU ranks, gloo

Ordinary DDP code, unchanged: the decorator starts one rank per accelerator with torchrun's environment (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), so ``init_process_group`` finds its peers by
itself. Every rank trains on its share of the data (``DistributedSampler``); DDP averages the gradients, so all
replicas stay identical; rank 0 saves the checkpoint (every rank holds the same weights). The call returns one
value per rank, in rank order: each rank's loss curve and a checksum of its weights, which agree.

Without a GPU the script picks CPU ranks by itself. The checkpoint goes to ``$CHECKPOINT_PATH`` (on Databricks, a
volume path), by default ``checkpoints/train_ddp.pt`` in the working directory. The same code, cell by cell, is in
``train_ddp.ipynb``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

import torch

from databricks.air import distributed

CPU_RANKS = 2


def use_cuda() -> bool:
    """GPUs unless ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU`` asks for CPU ranks or there are none.

    ``torch.cuda.is_available()`` only asks the driver for a device count; it creates no CUDA context in this
    process (and the ranks are fresh interpreters anyway).
    """
    requested = os.environ.get("DATABRICKS_AIR_ACCELERATOR_TYPE", "").strip().upper()
    if requested:
        return requested != "CPU"
    return torch.cuda.is_available()


USE_CUDA = use_cuda()


def on_every_accelerator() -> Callable[[Callable[..., Any]], Any]:
    """``@distributed()`` (one rank per visible GPU) on a GPU host, otherwise 2 CPU ranks."""
    if USE_CUDA:
        return distributed(timeout=3600)
    return distributed(accelerator_type="CPU", num_accelerators=CPU_RANKS, timeout=3600)


@on_every_accelerator()
def train(epochs: int, batch_size: int, lr: float, cuda: bool, checkpoint_path: Optional[str] = None) -> Dict[str, Any]:
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    # 1. Join the process group: nccl on GPUs (one per rank), gloo on CPU ranks.
    if cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    # 2. The same data on every rank (fixed seed): a noisy nonlinear function of 32 features. The sampler gives
    #    each rank a different 1/world_size of it per epoch.
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(4096, 32, generator=generator)
    teacher = torch.randn(32, 1, generator=generator)
    targets = torch.tanh(inputs @ teacher) + 0.05 * torch.randn(4096, 1, generator=generator)
    dataset = TensorDataset(inputs, targets)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)

    # 3. The model, identical on every rank (DDP also broadcasts rank 0's weights when it wraps the model).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))
    model = DistributedDataParallel(model.to(device), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()

    # 4. Train; the loss of an epoch is averaged over every sample of every rank.
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        model.train()
        totals = torch.zeros(2, device=device, dtype=torch.float64)  # loss sum, sample count
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces the gradients here, overlapped with the backward pass
            optimizer.step()
            totals[0] += loss.detach().double() * x.size(0)
            totals[1] += x.size(0)
        dist.all_reduce(totals)
        losses.append(float(totals[0] / totals[1]))
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

    # 5. Rank 0 saves the weights (identical everywhere); the others wait, so the file is complete on return.
    if checkpoint_path and rank == 0:
        torch.save(model.module.state_dict(), checkpoint_path)
    dist.barrier()

    checksum = sum(float(p.detach().double().abs().sum()) for p in model.parameters())
    del model  # the model goes before its process group: DDP freed after it can hang gloo's teardown
    dist.destroy_process_group()
    return {"rank": rank, "world_size": world_size, "device": str(device), "losses": losses, "checksum": checksum}


def main() -> None:
    # On Databricks, a volume path such as /Volumes/main/default/checkpoints/ddp/model.pt; here, the working directory.
    checkpoint = os.path.abspath(os.environ.get("CHECKPOINT_PATH", os.path.join("checkpoints", "train_ddp.pt")))
    os.makedirs(os.path.dirname(checkpoint), exist_ok=True)
    results = train.distributed(epochs=4, batch_size=64, lr=3e-3, cuda=USE_CUDA, checkpoint_path=checkpoint)
    first, last = results[0]["losses"][0], results[0]["losses"][-1]
    agree = len({r["checksum"] for r in results}) == 1
    print(f"{len(results)} ranks: loss {first:.4f} -> {last:.4f}; weights identical on every rank: {agree}")
    print(f"checkpoint saved by rank 0: {checkpoint}")
    print(results)


if __name__ == "__main__":
    main()
