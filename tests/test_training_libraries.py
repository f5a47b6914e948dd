"""Hugging Face ``Trainer``, ``accelerate`` and Lightning under ``@distributed``, on 2 CPU ranks over gloo.

Each trains (or gathers) as one job of 2 processes, as under ``torchrun --nproc_per_node=2``: the library sees a
world of 2, and the replicas end with identical weights. CPU ranks get ``ACCELERATE_USE_CPU=true`` (unless the
caller set it), without which ``accelerate`` and ``Trainer`` would run two separate single-process trainings on a
machine without GPUs. Tiny models built from a config, random data, no downloads. A test skips when its library is
not installed (they are in the ``dev`` extra).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from databricks.air import distributed

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=600)


def checksum(model: Any) -> float:
    return sum(float(p.detach().double().abs().sum()) for p in model.parameters())


def assert_one_job_of_two(results: List[Dict[str, Any]]) -> None:
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["world_size"] for r in results] == [2, 2]
    assert results[0]["checksum"] == results[1]["checksum"]  # DDP kept the replicas in step


# --- Hugging Face Trainer -----------------------------------------------------------------------------------------


def train_with_hf_trainer(output_dir: str) -> Dict[str, Any]:
    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class RandomTokens(torch.utils.data.Dataset):
        def __init__(self) -> None:
            generator = torch.Generator().manual_seed(int(os.environ["RANK"]))
            self.tokens = torch.randint(0, 64, (32, 16), generator=generator)

        def __len__(self) -> int:
            return len(self.tokens)

        def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
            return {"input_ids": self.tokens[index], "labels": self.tokens[index]}

    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        max_steps=4,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        ddp_find_unused_parameters=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens())
    result = trainer.train()
    return {
        "rank": dist.get_rank(),
        "world_size": trainer.args.world_size,
        "parallel_mode": str(trainer.args.parallel_mode),
        "device": trainer.args.device.type,
        "loss": result.training_loss,
        "checksum": checksum(trainer.model),
    }


@pytest.mark.slow
def test_hf_trainer_trains_one_job_of_two_cpu_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    results = cpu2(train_with_hf_trainer).distributed(str(tmp_path / "trainer"))
    assert_one_job_of_two(results)
    assert {r["parallel_mode"] for r in results} == {"ParallelMode.DISTRIBUTED"}
    assert {r["device"] for r in results} == {"cpu"}
    assert all(r["loss"] > 0 for r in results)


# --- accelerate ---------------------------------------------------------------------------------------------------


def gather_with_accelerate() -> Dict[str, Any]:
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    gathered = accelerator.gather(torch.tensor([accelerator.process_index]))
    return {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "gathered": gathered.tolist(),
        "checksum": checksum(model),
    }


@pytest.mark.slow
def test_accelerate_sees_one_job_of_two_cpu_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("accelerate")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    results = cpu2(gather_with_accelerate).distributed()
    assert_one_job_of_two(results)
    assert {r["distributed_type"] for r in results} == {"DistributedType.MULTI_CPU"}
    assert [r["gathered"] for r in results] == [[0, 1], [0, 1]]


def accelerate_use_cpu() -> str:
    return os.environ.get("ACCELERATE_USE_CPU", "<unset>")


def test_cpu_ranks_keep_the_callers_accelerate_use_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_USE_CPU", "0")
    assert cpu2(accelerate_use_cpu).distributed() == ["0", "0"]
    monkeypatch.delenv("ACCELERATE_USE_CPU")
    assert cpu2(accelerate_use_cpu).distributed() == ["true", "true"]


# --- Lightning ----------------------------------------------------------------------------------------------------


def train_with_lightning() -> Dict[str, Any]:
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.utilities import rank_zero_only

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.linear(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    generator = torch.Generator().manual_seed(int(os.environ["RANK"]))
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    torch.manual_seed(0)
    model = Regression()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=int(os.environ["LOCAL_WORLD_SIZE"]),
        strategy="ddp",
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, loader)
    return {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "rank_zero_only": rank_zero_only.rank,
        "checksum": checksum(model),
    }


@pytest.mark.slow
def test_lightning_trains_one_job_of_two_cpu_ranks() -> None:
    pytest.importorskip("pytorch_lightning")
    results = cpu2(train_with_lightning).distributed()
    assert_one_job_of_two(results)
    assert [r["rank_zero_only"] for r in results] == [0, 1]
