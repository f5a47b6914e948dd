"""Seeded corpora for ``bench/migrate_speed.py``: ML training code with and without ``serverless_gpu``.

Everything is generated from one ``random.Random(seed)``, so the same seed gives the same bytes on every machine.
The code is the kind an ML repository holds (configs, datasets, models, training and evaluation loops, checkpoints,
argument parsing), assembled from blocks whose names and numbers vary, so that no two files are alike. Every
generated Python text is checked with ``ast.parse`` before it is written.

* :func:`write_plain_files`: scripts with nothing to migrate; a few of them (``near_miss`` of them) still mention
  words the tool's text pre-filter looks for (``num_gpus``, ``--gpus``), as real code does.
* :func:`write_matching_files`: scripts of about ``lines`` lines that import ``serverless_gpu`` (every import form)
  and decorate functions with the old keywords, all of them mappable, so every file must change.
* :func:`notebook_cells` and the two writers: one notebook of code and markdown cells, with ``serverless_gpu``
  imports and decorators in several cells and IPython magics, written as ``.ipynb`` or as a Databricks source.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import random
from typing import Callable, List, Sequence, Tuple

# The old decorator arguments the corpora use, each with what it must become; all mappable (nothing blocks a file).
OLD_KEYWORDS: Sequence[Tuple[str, str]] = (
    ('gpus=8, gpu_type="H100"', 'num_accelerators=8, accelerator_type="GPU_8xH100"'),
    ('gpus=1, gpu_type="H100"', 'num_accelerators=1, accelerator_type="GPU_1xH100"'),
    ('gpus=1, gpu_type="A10"', 'num_accelerators=1, accelerator_type="GPU_1xA10"'),
    ('gpus=16, gpu_type="H100", remote=True', 'num_accelerators=16, accelerator_type="GPU_8xH100", remote=True'),
    ('gpus=8, gpu_type="B300"', 'num_accelerators=8, accelerator_type="GPU_8xB300"'),
    ("gpus=2", "num_accelerators=2"),
)

_WORDS = (
    "encoder decoder backbone head adapter block layer proj embed token patch latent vision text audio graph "
    "policy critic reward value student teacher ranker retriever tower expert router mixer"
).split()
_DATASETS = ("imagenet", "cifar10", "wikitext", "librispeech", "coco", "criteo", "movielens", "squad")


def _name(rng: random.Random, parts: int = 2) -> str:
    return "_".join(rng.choice(_WORDS) for _ in range(parts))


def _camel(rng: random.Random) -> str:
    return "".join(word.capitalize() for word in _name(rng).split("_"))


# --- blocks of realistic code; each returns source text ending with a blank line --------------------------------


def _config_block(rng: random.Random) -> str:
    fields = [
        ("learning_rate", "float", f"{rng.choice([1, 2, 3, 5])}e-{rng.randint(3, 5)}"),
        ("batch_size", "int", str(rng.choice([16, 32, 64, 128, 256]))),
        ("epochs", "int", str(rng.randint(1, 90))),
        ("weight_decay", "float", f"{rng.choice([0.0, 0.01, 0.05, 0.1])}"),
        ("warmup_steps", "int", str(rng.choice([0, 100, 500, 2000]))),
        ("hidden_size", "int", str(rng.choice([256, 512, 768, 1024, 4096]))),
        ("dropout", "float", f"{rng.choice([0.0, 0.1, 0.2])}"),
        ("seed", "int", str(rng.randint(0, 9999))),
        ("grad_clip", "float", f"{rng.choice([0.5, 1.0, 5.0])}"),
        ("dataset", "str", repr(rng.choice(_DATASETS))),
        ("checkpoint_dir", "str", repr(f"/dbfs/checkpoints/{_name(rng)}")),
        ("log_every", "int", str(rng.choice([10, 50, 100]))),
    ]
    rng.shuffle(fields)
    chosen = fields[: rng.randint(5, len(fields))]
    body = "".join(f"    {name}: {kind} = {value}\n" for name, kind, value in chosen)
    return (
        f"@dataclasses.dataclass\nclass {_camel(rng)}Config:\n"
        f'    """Hyper-parameters of the {_name(rng, 1)} run."""\n\n{body}\n\n'
    )


def _dataset_block(rng: random.Random) -> str:
    name = _camel(rng)
    features = rng.choice([16, 32, 128, 784, 3072])
    return f'''class {name}Dataset(Dataset):
    """Random {features}-feature samples standing in for {rng.choice(_DATASETS)}."""

    def __init__(self, size: int = {rng.choice([1000, 4096, 60000])}, seed: int = {rng.randint(0, 99)}) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, {features}, generator=generator)
        self.labels = torch.randint(0, {rng.choice([2, 10, 100, 1000])}, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.features[index], self.labels[index]


def make_{_name(rng)}_loader(dataset: Dataset, batch_size: int, shuffle: bool = True) -> DataLoader:
    sampler = None
    if dist.is_available() and dist.is_initialized():
        sampler = DistributedSampler(dataset, shuffle=shuffle)
        shuffle = False
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        sampler=sampler,
        num_workers={rng.choice([0, 2, 4, 8])},
        pin_memory=torch.cuda.is_available(),
        drop_last=True,
    )


'''


def _model_block(rng: random.Random) -> str:
    name = _camel(rng)
    layers = rng.randint(2, 6)
    hidden = rng.choice([128, 256, 512])
    body = "".join(
        f"            nn.Linear({hidden}, {hidden}),\n            nn.{rng.choice(['ReLU', 'GELU', 'SiLU'])}(),\n"
        for _ in range(layers)
    )
    return f'''class {name}(nn.Module):
    """A {layers}-layer MLP {_name(rng, 1)} with a residual connection."""

    def __init__(self, in_features: int, num_classes: int, dropout: float = {rng.choice([0.0, 0.1])}) -> None:
        super().__init__()
        self.stem = nn.Linear(in_features, {hidden})
        self.body = nn.Sequential(
{body}        )
        self.norm = nn.LayerNorm({hidden})
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear({hidden}, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + self.body(x)
        x = self.dropout(self.norm(x))
        return self.head(x)


'''


def _train_block(rng: random.Random) -> str:
    name = _name(rng)
    return f'''def train_{name}(
    model: nn.Module, loader: DataLoader, optimizer, epoch: int, log_every: int = {rng.choice([10, 50])}
):
    """One epoch of training; returns the mean loss over this rank's batches."""
    model.train()
    total, batches = 0.0, 0
    for step, (features, labels) in enumerate(loader):
        features = features.to(DEVICE, non_blocking=True)
        labels = labels.to(DEVICE, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=DEVICE.type, enabled={rng.choice(["True", "False"])}):
            logits = model(features)
            loss = F.cross_entropy(logits, labels, label_smoothing={rng.choice([0.0, 0.1])})
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm={rng.choice([0.5, 1.0])})
        optimizer.step()
        total += loss.item()
        batches += 1
        if step % log_every == 0:
            logger.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
    return total / max(batches, 1)


'''


def _eval_block(rng: random.Random) -> str:
    return f'''@torch.no_grad()
def evaluate_{_name(rng)}(model: nn.Module, loader: DataLoader) -> dict:
    """Accuracy and loss over the loader, summed over ranks when a process group is up."""
    model.eval()
    correct = torch.zeros((), device=DEVICE)
    seen = torch.zeros((), device=DEVICE)
    loss_sum = torch.zeros((), device=DEVICE)
    for features, labels in loader:
        features, labels = features.to(DEVICE), labels.to(DEVICE)
        logits = model(features)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum")
        correct += (logits.argmax(dim=-1) == labels).sum()
        seen += labels.numel()
    if dist.is_initialized():
        for tensor in (correct, seen, loss_sum):
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return {{"accuracy": (correct / seen).item(), "loss": (loss_sum / seen).item()}}


'''


def _schedule_block(rng: random.Random) -> str:
    return f'''def {_name(rng)}_schedule(
    step: int, total_steps: int, warmup: int = {rng.choice([100, 500, 1000])}
) -> float:
    """Linear warm-up, then cosine decay to {rng.choice([0, 5, 10])}% of the peak rate."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    floor = {rng.choice([0.0, 0.05, 0.1])}
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


'''


def _checkpoint_block(rng: random.Random) -> str:
    name = _name(rng, 1)
    return f'''def save_{name}_checkpoint(model: nn.Module, optimizer, epoch: int, directory: str) -> str:
    """Rank 0 writes the model and optimizer state; every rank waits for it."""
    path = os.path.join(directory, f"{name}-epoch{{epoch:03d}}.pt")
    if not dist.is_initialized() or dist.get_rank() == 0:
        os.makedirs(directory, exist_ok=True)
        state = {{"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
    if dist.is_initialized():
        dist.barrier()
    return path


def load_{name}_checkpoint(model: nn.Module, optimizer, path: str) -> int:
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


'''


def _metrics_block(rng: random.Random) -> str:
    return f'''class {_camel(rng)}Meter:
    """Running mean of a metric over the last {rng.choice([50, 100, 500])} updates."""

    def __init__(self, window: int = {rng.choice([50, 100, 500])}) -> None:
        self.window = window
        self.values: list = []

    def update(self, value: float) -> None:
        self.values.append(float(value))
        if len(self.values) > self.window:
            self.values.pop(0)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else float("nan")

    def __repr__(self) -> str:
        return f"{{type(self).__name__}}(mean={{self.mean:.4f}}, n={{len(self.values)}})"


'''


def _args_block(rng: random.Random) -> str:
    return f"""def parse_{_name(rng, 1)}_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train a {_name(rng)} model.")
    parser.add_argument("--epochs", type=int, default={rng.randint(1, 50)})
    parser.add_argument("--batch-size", type=int, default={rng.choice([32, 64, 128])})
    parser.add_argument("--lr", type=float, default={rng.choice([1e-3, 3e-4, 1e-4])})
    parser.add_argument("--data-dir", default="/dbfs/data/{rng.choice(_DATASETS)}")
    parser.add_argument("--resume", default=None, help="checkpoint to resume from")
    parser.add_argument("--amp", action="store_true", help="mixed precision")
    return parser.parse_args(argv)


"""


def _near_miss_block(rng: random.Random) -> str:
    """Device set-up code that mentions ``gpus`` the way real scripts do, with nothing to migrate."""
    return f"""def describe_{_name(rng, 1)}_devices() -> dict:
    num_gpus = torch.cuda.device_count()
    world = int(os.environ.get("WORLD_SIZE", max(num_gpus, 1)))
    parser_hint = "pass --gpus {rng.choice([1, 2, 4, 8])} to use fewer devices"
    return {{"num_gpus": num_gpus, "world_size": world, "hint": parser_hint}}


"""


_BLOCKS: Sequence[Callable[[random.Random], str]] = (
    _config_block,
    _dataset_block,
    _model_block,
    _train_block,
    _eval_block,
    _schedule_block,
    _checkpoint_block,
    _metrics_block,
    _args_block,
)

_HEADER_IMPORTS = (
    "import argparse\nimport dataclasses\nimport logging\nimport math\nimport os\n\n"
    "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
    "from torch.utils.data import DataLoader, Dataset, DistributedSampler\n"
)
_PRELUDE = (
    "\nlogger = logging.getLogger(__name__)\n"
    'DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n\n\n'
)


def _module_text(rng: random.Random, chunks: List[str], extra_imports: str = "") -> str:
    """A module: docstring, imports, prelude, then ``chunks`` in a shuffled order."""
    chunks = list(chunks)
    rng.shuffle(chunks)
    head = f'"""{_name(rng).replace("_", " ").capitalize()} training utilities."""\n\n'
    text = (head + _HEADER_IMPORTS + extra_imports + _PRELUDE + "".join(chunks)).rstrip("\n") + "\n"
    ast.parse(text)  # the corpus must be valid Python, or the benchmark measures error paths
    return text


# --- corpora ------------------------------------------------------------------------------------------------------


def write_plain_files(directory: str, count: int, seed: int, near_miss: int) -> List[str]:
    """``count`` scripts with nothing to migrate, of 1 to 40 blocks (about 30 to 1,000 lines); returns their paths.

    The first ``near_miss`` (in a shuffled order) also mention ``num_gpus``/``--gpus``.
    """
    rng = random.Random(seed)
    near = set(rng.sample(range(count), near_miss))
    paths = []
    for index in range(count):
        blocks = min(40, max(1, int(rng.lognormvariate(1.6, 0.8))))
        extra = [_near_miss_block(rng)] if index in near else []
        folder = os.path.join(directory, f"pkg{index % 20:02d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{_name(rng)}_{index:04d}.py")
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(_module_text(rng, [rng.choice(_BLOCKS)(rng) for _ in range(blocks)] + extra))
        paths.append(path)
    return paths


def _decorated_function(rng: random.Random, decorator: str) -> str:
    return f'''@{decorator}
def run_{_name(rng)}(epochs: int = {rng.randint(1, 20)}, lr: float = {rng.choice([1e-3, 3e-4])}):
    """The training entry point, once per rank."""
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    model = nn.Linear({rng.choice([16, 64, 256])}, {rng.choice([2, 10])}).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for epoch in range(epochs):
        optimizer.zero_grad()
        loss = model(torch.randn(8, model.in_features, device=DEVICE)).square().mean()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()
    return loss.item()


'''


# (import statement, how the decorator is spelled) for every import form the tool rewrites.
_IMPORT_FORMS: Sequence[Tuple[str, str]] = (
    ("from serverless_gpu import distributed\n", "distributed"),
    ("from serverless_gpu import distributed, ray_launch\n", "distributed"),
    ("import serverless_gpu as sg\n", "sg.distributed"),
    ("import serverless_gpu\n", "serverless_gpu.distributed"),
    ("from serverless_gpu import distributed as launch\n", "launch"),
)


@dataclasses.dataclass(frozen=True)
class MatchingFile:
    """A generated script that must change, with how many decorators it holds."""

    path: str
    decorators: int


def write_matching_files(directory: str, count: int, lines: int, seed: int) -> List[MatchingFile]:
    """``count`` scripts of about ``lines`` lines, each importing ``serverless_gpu`` and using old keywords."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    files = []
    for index in range(count):
        statement, spelling = _IMPORT_FORMS[index % len(_IMPORT_FORMS)]
        decorators = rng.randint(2, 4)
        extra = [_decorated_function(rng, f"{spelling}({rng.choice(OLD_KEYWORDS)[0]})") for _ in range(decorators)]
        chunks = list(extra)
        while sum(chunk.count("\n") for chunk in chunks) < lines - 20:  # the header is about 20 lines
            chunks.append(rng.choice(_BLOCKS)(rng))
        text = _module_text(rng, chunks, statement)
        path = os.path.join(directory, f"train_{_name(rng)}_{index:03d}.py")
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        files.append(MatchingFile(path, decorators))
    return files


# --- notebooks ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NotebookCell:
    """One cell: ``kind`` is ``"markdown"`` or ``"code"``; ``decorators`` counts the old decorators it holds."""

    kind: str
    source: str
    decorators: int = 0


def notebook_cells(count: int, seed: int) -> List[NotebookCell]:
    """A notebook's cells: about a quarter markdown; code with imports, decorators, line and cell magics."""
    rng = random.Random(seed)
    cells = [
        NotebookCell("markdown", "# Distributed training\n\nTrains the models below on serverless GPUs."),
        NotebookCell("code", "%pip install serverless_gpu torchmetrics==1.4.0"),
        NotebookCell("code", "%load_ext autoreload\n%autoreload 2\n" + _HEADER_IMPORTS + _PRELUDE.strip() + "\n"),
        NotebookCell("code", _IMPORT_FORMS[0][0].rstrip("\n")),
    ]
    import_every = max(1, count // 6)
    spelling = _IMPORT_FORMS[0][1]
    while len(cells) < count:
        position = len(cells)
        roll = rng.random()
        if position % import_every == 0:
            statement, spelling = rng.choice(_IMPORT_FORMS)
            cells.append(NotebookCell("code", statement.rstrip("\n")))
        elif roll < 0.25:
            cells.append(
                NotebookCell(
                    "markdown",
                    f"## {_name(rng).replace('_', ' ').title()}\n\nResults on {rng.choice(_DATASETS)} follow.",
                )
            )
        elif roll < 0.40:
            decorator = f"{spelling}({rng.choice(OLD_KEYWORDS)[0]})"
            text = _decorated_function(rng, decorator).rstrip("\n")
            if rng.random() < 0.3:
                text = "%%time\n" + text
            cells.append(NotebookCell("code", text, decorators=1))
        elif roll < 0.48:
            magic = rng.choice(["!nvidia-smi", "files = !ls /dbfs/data", "%matplotlib inline", "%env NCCL_DEBUG=INFO"])
            cells.append(NotebookCell("code", f"{magic}\nprint({rng.randint(0, 99)})"))
        elif roll < 0.50:
            cells.append(NotebookCell("code", "%%bash\nnvidia-smi --query-gpu=name --format=csv"))
        else:
            cells.append(NotebookCell("code", rng.choice(_BLOCKS)(rng).rstrip("\n")))
    for cell in cells:
        if cell.kind == "code" and not any(_is_magic_line(line) for line in cell.source.splitlines()):
            ast.parse(cell.source)
    return cells[:count]


def _is_magic_line(line: str) -> bool:
    return line.lstrip().startswith(("%", "!")) or "= !" in line


def _lines(text: str) -> List[str]:
    return text.splitlines(keepends=True)


def write_ipynb(path: str, cells: Sequence[NotebookCell], output_lines: int = 0) -> None:
    """The cells as a Jupyter notebook in nbformat's own layout (indent 1, sorted keys, sources as lists); with
    ``output_lines``, each code cell has run and printed that many lines of training log (as a saved notebook has)."""

    def outputs(number: int) -> List[dict]:  # type: ignore[type-arg]
        if not output_lines:
            return []
        text = [
            f"epoch {epoch} step {number * 100 + epoch}: loss {1 / (epoch + number + 1):.6f}, "
            f"throughput {1000 + number % 97} samples/s\n"
            for epoch in range(output_lines)
        ]
        return [{"name": "stdout", "output_type": "stream", "text": text}]

    document = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": _lines(cell.source)}
            if cell.kind == "markdown"
            else {
                "cell_type": "code",
                "execution_count": number if output_lines else None,
                "metadata": {},
                "outputs": outputs(number),
                "source": _lines(cell.source),
            }
            for number, cell in enumerate(cells, start=1)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


def databricks_cell(cell: NotebookCell) -> str:
    """A cell as a Databricks source writes it: ``# MAGIC`` lines for markdown and magic cells.

    A Python cell's IPython line magics have no place in a Databricks Python cell, so they are left out.
    """
    if cell.kind == "markdown":
        return _magic_lines("%md\n" + cell.source)
    first = cell.source.lstrip()
    if first.startswith("%%bash"):
        return _magic_lines("%sh" + cell.source[len("%%bash") :])
    if first.startswith("%pip"):
        return _magic_lines(cell.source)
    kept = [line for line in cell.source.splitlines() if not _is_magic_line(line)]
    return "\n".join(kept)


def _magic_lines(text: str) -> str:
    return "\n".join(f"# MAGIC {line}" if line else "# MAGIC" for line in text.splitlines())


def write_databricks(path: str, cells: Sequence[NotebookCell]) -> None:
    """The cells as a Databricks notebook source (``# COMMAND ----------`` between cells)."""
    body = "\n\n# COMMAND ----------\n\n".join(databricks_cell(cell) for cell in cells)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write("# Databricks notebook source\n" + body + "\n")
