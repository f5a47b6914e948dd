"""FSDP2 (``fully_shard``) through ``@distributed``, with a sharded checkpoint on a volume.

    python examples/train_fsdp.py                                      # every visible GPU, nccl
    DATABRICKS_AIR_ACCELERATOR_TYPE=CPU python examples/train_fsdp.py  # 2 CPU ranks, gloo

torch's current FSDP API: ``fully_shard`` each block, then the whole model, over a 1-D device mesh of every rank.
Parameters, gradients and optimizer state are sharded: each rank holds 1/world_size of them, and the weights are
gathered only for the layer being computed. The checkpoint is sharded too: every rank writes its own shards with
``torch.distributed.checkpoint`` (DCP) through ``databricks.air.data.UCVolumeWriter`` (a commit marker written last,
checksums), and a freshly built, freshly sharded model loads it back with ``UCVolumeReader``, checking every byte;
its loss is the trained model's.

The checkpoint goes to ``$CHECKPOINT_DIR`` (on Databricks, a volume path such as
``/Volumes/main/default/checkpoints/fsdp``), by default ``checkpoints/train_fsdp`` in the working directory. The
same code, cell by cell, is in ``train_fsdp.ipynb``.
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


@on_every_accelerator()
def train(
    epochs: int, steps_per_epoch: int, batch_size: int, lr: float, cuda: bool, checkpoint_dir: str
) -> Dict[str, Any]:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.nn as nn
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from databricks.air.data import UCVolumeReader, UCVolumeWriter

    # 1. Join the process group and build a device mesh of every rank.
    if cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh(device.type, (world_size,))

    def build_model() -> nn.Module:
        """A residual MLP, sharded block by block, then as a whole (for the layers outside the blocks)."""
        torch.manual_seed(0)  # the same initial weights on every rank before sharding
        model = ResidualMLP(width=128, depth=4).to(device)
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model

    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)  # built after sharding: it sees the shards
    loss_fn = nn.MSELoss()

    # 2. Data: each rank draws its own batches (a different seed per rank) from one fixed task.
    teacher = torch.Generator().manual_seed(0)
    weights = torch.randn(64, 1, generator=teacher) / 8  # x @ weights ~ N(0, 1)
    batches = torch.Generator().manual_seed(1 + rank)

    def batch() -> tuple:
        x = torch.randn(batch_size, 64, generator=batches)
        return x.to(device), torch.sin(x @ weights).to(device)

    def global_mean(value: torch.Tensor) -> float:
        value = value.detach().clone()
        dist.all_reduce(value)
        return float(value) / world_size

    # 3. Train: FSDP gathers each block's weights for its forward and backward, and reduce-scatters the gradients.
    losses = []
    for epoch in range(epochs):
        total = torch.zeros((), device=device)
        for _ in range(steps_per_epoch):
            x, y = batch()
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.detach()
        losses.append(global_mean(total / steps_per_epoch))
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.4f}", flush=True)

    # 4. Save a sharded checkpoint: every rank writes its own shards, no rank gathers the whole model.
    held_out = torch.Generator().manual_seed(12345)
    x_eval = torch.randn(512, 64, generator=held_out)
    x_eval, y_eval = x_eval.to(device), torch.sin(x_eval @ weights).to(device)
    with torch.no_grad():
        trained_loss = global_mean(loss_fn(model(x_eval), y_eval))
    model.reshard()  # the root keeps its weights gathered after a forward without backward: shard them again
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, storage_writer=UCVolumeWriter(checkpoint_dir))

    # 5. Load it into a fresh model and optimizer, sharded the same way (a restart would do exactly this).
    restored = build_model()
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=lr)
    model_state, optimizer_state = get_state_dict(restored, restored_optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, storage_reader=UCVolumeReader(checkpoint_dir))
    set_state_dict(restored, restored_optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    with torch.no_grad():
        restored_loss = global_mean(loss_fn(restored(x_eval), y_eval))
    restored.reshard()

    # Every rank gathers the full weights for the checksum (fine for a small model; never needed for training).
    checksum = sum(float(p.detach().full_tensor().double().abs().sum()) for p in restored.parameters())
    local = sum(p.to_local().numel() for p in model.parameters())
    shard_fraction = local / sum(p.numel() for p in model.parameters())
    del model, restored  # models go before their process group (see train_ddp.py)
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world_size,
        "device": str(device),
        "losses": losses,
        "trained_loss": trained_loss,
        "restored_loss": restored_loss,
        "checksum": checksum,
        "shard_fraction": shard_fraction,
    }


class ResidualMLP(torch.nn.Module):
    """``depth`` residual blocks (LayerNorm, Linear, GELU, Linear) between an input and an output projection."""

    def __init__(self, width: int, depth: int, features: int = 64) -> None:
        super().__init__()
        nn = torch.nn
        self.project_in = nn.Linear(features, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
            for _ in range(depth)
        )
        self.project_out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.project_in(x)
        for block in self.blocks:
            h = h + block(h)
        return self.project_out(h)


def main() -> None:
    checkpoint_dir = os.path.abspath(os.environ.get("CHECKPOINT_DIR", os.path.join("checkpoints", "train_fsdp")))
    results = train.distributed(
        epochs=4, steps_per_epoch=15, batch_size=64, lr=3e-3, cuda=USE_CUDA, checkpoint_dir=checkpoint_dir
    )
    first, last = results[0]["losses"][0], results[0]["losses"][-1]
    print(
        f"{len(results)} ranks, each holding {results[0]['shard_fraction']:.0%} of the weights: "
        f"loss {first:.4f} -> {last:.4f}"
    )
    print(f"sharded checkpoint in {checkpoint_dir}: {sorted(os.listdir(checkpoint_dir))}")
    print(f"held-out loss {results[0]['trained_loss']:.6f} trained, {results[0]['restored_loss']:.6f} restored")
    print(results)


if __name__ == "__main__":
    main()
