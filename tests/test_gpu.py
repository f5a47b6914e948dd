"""On a CUDA machine: every visible GPU gets a rank, NCCL works, and the caller never initialises CUDA."""

from __future__ import annotations

import os
import sys

import pytest

from databricks.air import compute, distributed

pytestmark = pytest.mark.gpu


def nccl_all_reduce() -> tuple:
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    value = torch.ones(1, device=f"cuda:{local_rank}") * (dist.get_rank() + 1)
    dist.all_reduce(value)
    dist.destroy_process_group()
    return local_rank, torch.cuda.get_device_name(local_rank), float(value.item())


def test_one_rank_per_visible_gpu_with_nccl() -> None:
    count = compute.attached_gpu_count()
    fn = distributed()(nccl_all_reduce)
    assert fn.num_accelerators == count
    results = fn.distributed()
    expected = count * (count + 1) / 2
    assert [r[0] for r in results] == list(range(count))
    assert all(r[2] == expected for r in results)
    # The caller counted GPUs through NVML and never created a CUDA context.
    torch = sys.modules.get("torch")
    assert torch is None or not torch.cuda.is_initialized()


def cuda_seeds() -> tuple:
    import torch

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return torch.initial_seed(), torch.cuda.initial_seed()  # the second initialises CUDA, which seeds it


def test_cuda_generators_are_seeded_afresh_in_each_rank_of_each_call() -> None:
    fn = distributed()(cuda_seeds)
    found = fn.distributed() + fn.distributed()
    seeds = [seed for pair in found for seed in pair]
    assert len(set(seeds)) == len(seeds), found  # and CUDA's are not the CPU's, as in a new interpreter


def test_a_subset_of_gpus_returns_real_values() -> None:
    if compute.attached_gpu_count() < 2:
        pytest.skip("needs two GPUs")
    results = distributed(num_accelerators=2)(nccl_all_reduce).distributed()
    assert [r[2] for r in results] == [3.0, 3.0]


def test_the_attached_gpu_is_detected_by_name() -> None:
    from databricks.air.compute import AcceleratorType, attached_gpu_name, parse_gpu_model

    name = attached_gpu_name()
    assert name  # NVML names the device
    fn = distributed()(nccl_all_reduce)
    model = parse_gpu_model(name)
    if model is None:  # H200, A100, L4...: runs, without a reference shape
        assert fn.accelerator_type is None
    else:
        assert fn.accelerator_type is AcceleratorType.from_gpu_type(model, compute.attached_gpu_count())


# --- the framework examples on every GPU, over NCCL (their CPU runs are in test_frameworks.py) ---------------------


def test_ddp_example_on_every_gpu(tmp_path) -> None:
    from example_support import assert_converged_and_agree, run_example

    results = run_example("train_ddp", tmp_path, gpus=compute.attached_gpu_count())
    assert_converged_and_agree(results)
    assert (tmp_path / "checkpoints" / "train_ddp.pt").exists()


def test_fsdp_example_on_every_gpu_shards_and_restores(tmp_path) -> None:
    from example_support import assert_converged_and_agree, run_example

    count = compute.attached_gpu_count()
    results = run_example("train_fsdp", tmp_path, gpus=count)
    assert_converged_and_agree(results)
    assert sum(r["shard_fraction"] for r in results) == pytest.approx(1.0)
    assert all(r["restored_loss"] == r["trained_loss"] for r in results)
    files = sorted(p.name for p in (tmp_path / "checkpoints" / "train_fsdp").iterdir())
    assert files == sorted([".checksums.json", ".metadata"] + [f"__{rank}_0.distcp" for rank in range(count)])


def test_deepspeed_example_on_every_gpu(tmp_path) -> None:
    pytest.importorskip("deepspeed")
    from example_support import assert_converged_and_agree, run_example

    results = run_example("train_deepspeed", tmp_path, gpus=compute.attached_gpu_count())
    assert_converged_and_agree(results)
    assert all(r["zero_stage"] == 2 for r in results)
