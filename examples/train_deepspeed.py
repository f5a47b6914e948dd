"""DeepSpeed ZeRO stage 2, configured by a dict, through ``@distributed``: every GPU of this node, or 2 CPU ranks.

    DS_BUILD_OPS=0 pip install --no-build-isolation -c constraints.txt ".[deepspeed]"   # in a checkout (README)
    python examples/train_deepspeed.py                                      # every visible GPU, nccl
    DATABRICKS_AIR_ACCELERATOR_TYPE=CPU python examples/train_deepspeed.py  # 2 CPU ranks, gloo

What users of the ``deepspeed`` launcher write, unchanged, minus the launcher: the decorator gives every rank
torchrun's environment, from which ``deepspeed.init_distributed`` and ``deepspeed.initialize`` take rank, world
size and rendezvous. ZeRO stage 2 shards the optimizer state and the gradients over the ranks (each rank keeps
the full weights, updates its shard, and all-gathers the rest), so every rank ends with the same weights.

On CPU ranks DeepSpeed uses its CPU accelerator over gloo. The optimizer is torch's AdamW (``torch_adam``), so that
nothing needs compiling: DeepSpeed's fused Adam is a CUDA extension built on first use with ``nvcc``. The same
code, cell by cell, is in ``train_deepspeed.ipynb``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict

import torch

from databricks.air import distributed

CPU_RANKS = 2


def use_cuda() -> bool:
    """GPUs unless ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU`` asks for CPU ranks or there are none."""
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


def zero2_config(micro_batch_size: int, lr: float, bf16: bool) -> Dict[str, Any]:
    """The DeepSpeed configuration, as a dict instead of a JSON file."""
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": 2, "contiguous_gradients": True, "overlap_comm": False},
        "bf16": {"enabled": bf16},
        "steps_per_print": 1_000_000,  # the example prints its own progress
    }


def skip_shared_memory_kernel() -> None:
    """Let DeepSpeed's CPU accelerator all-reduce through gloo instead of its shared-memory kernel.

    That kernel is a C++ extension compiled on first use (a minute or more, and a compiler on the machine); gloo
    is plenty for this model. (Kept apart from ``train``: cloudpickle 3.1 cannot ship a function that names both
    the global ``torch`` and an attribute called ``ops``, since it mistakes it for the ``torch.ops`` module.)
    """
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # DeepSpeed caches this dict once per process


@on_every_accelerator()
def train(epochs: int, micro_batch_size: int, lr: float, cuda: bool) -> Dict[str, Any]:
    if not cuda:
        # DeepSpeed picks its accelerator when first imported; a GPU host asked for CPU ranks must say so first.
        os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed
    import torch.distributed as dist
    import torch.nn as nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    # 1. Join the process group: nccl on GPUs, gloo on CPU ranks (DeepSpeed's CPU default, oneCCL, is rarely
    #    installed).
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        deepspeed.init_distributed(dist_backend="nccl")
    else:
        skip_shared_memory_kernel()
        deepspeed.init_distributed(dist_backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    # 2. Model and data: the same on every rank; the sampler splits the data.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1))
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(4096, 32, generator=generator)
    targets = torch.tanh(inputs @ torch.randn(32, 1, generator=generator) / 4)
    dataset = TensorDataset(inputs, targets)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=micro_batch_size, sampler=sampler, drop_last=True)

    # 3. DeepSpeed builds the optimizer from the config and wraps the model in its engine (ZeRO stage 2).
    bf16 = cuda and torch.cuda.is_bf16_supported()
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=zero2_config(micro_batch_size, lr, bf16)
    )
    dtype = torch.bfloat16 if bf16 else torch.float32

    # 4. Train: the engine's backward reduces gradient shards; its step updates this rank's optimizer shard.
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros((), device=engine.device, dtype=torch.float64)
        for x, y in loader:
            x, y = x.to(engine.device, dtype), y.to(engine.device, dtype)
            loss = nn.functional.mse_loss(engine(x).float(), y.float())
            engine.backward(loss)
            engine.step()
            total += loss.detach().double()
        dist.all_reduce(total)
        losses.append(float(total) / (len(loader) * world_size))
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.5f}", flush=True)

    checksum = sum(float(p.detach().double().abs().sum()) for p in engine.module.parameters())
    result = {
        "rank": rank,
        "world_size": world_size,
        "device": str(engine.device),
        "zero_stage": engine.zero_optimization_stage(),
        "losses": losses,
        "checksum": checksum,
    }
    del engine, model  # models go before their process group (see train_ddp.py)
    dist.destroy_process_group()
    return result


def main() -> None:
    results = train.distributed(epochs=4, micro_batch_size=64, lr=2e-3, cuda=USE_CUDA)
    first, last = results[0]["losses"][0], results[0]["losses"][-1]
    agree = len({r["checksum"] for r in results}) == 1
    print(
        f"{len(results)} ranks, ZeRO stage {results[0]['zero_stage']}: loss {first:.5f} -> {last:.5f}; "
        f"weights identical on every rank: {agree}"
    )
    print(results)


if __name__ == "__main__":
    main()
