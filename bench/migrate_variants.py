"""Seeded corpora of other shapes for ``bench/migrate_speed.py``: the same kind of ML code as
``bench/migrate_corpus.py``, with the old API reached in every way real code reaches it.

Figures measured on one corpus do not carry over to another of the same size: what costs is where
the old API sits, not how many lines there are. So each corpus here varies one thing the other one holds fixed.

* :func:`write_placed_files` (``placed``): scripts of about ``lines`` lines whose 2 to 4 uses of the old decorator sit
  anywhere code puts them: a top-level decorated function, under or over other decorators, a method (under
  ``@staticmethod``), a function defined inside another, the call form ``distributed(...)(fn)``,
  ``fn.with_overrides(...)``, keywords over several lines with comments, ``GPUType`` members, and an import inside a
  function; every import form, and several of them in one file;
* :func:`write_sparse_files` (``sparse``): long scripts where the old API is two lines among hundreds of
  statements, the shape of a large repository's entry points;
* :func:`varied_notebook_cells`: a notebook whose imports come in several cells and forms, whose uses sit in any of
  the placements above, among line and cell magics (``%pip``, ``!cmd``, ``x = !cmd``, ``%%time``, ``%%capture``,
  ``%%bash``, ``%run``, ``%env``) and markdown.

Every generated Python text is checked with :func:`ast.parse`. A benchmark can check that after one run no old
keyword is left (:func:`old_keywords`), and that each ``gpus=`` became one ``num_accelerators=``.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import random
from typing import Callable, List, Sequence, Tuple

import migrate_corpus as base  # bench/ is on sys.path when a script there runs

# (import statement, the name the decorator is reached by); several may go into one file.
IMPORT_FORMS: Sequence[Tuple[str, str]] = (
    *base._IMPORT_FORMS,
    ("from serverless_gpu import ray_launch, distributed as run_on\n", "run_on"),
    ("import serverless_gpu as air_old\n", "air_old.distributed"),
    ("from serverless_gpu import *\n", "distributed"),
    ("from databricks.air import distributed  # new import, old keywords\n", "distributed"),
)
_GPU_TYPE_IMPORT = "from serverless_gpu.compute import GPUType\n"
# Keyword sets with a GPUType member (with the import above).
_MEMBER_KEYWORDS = ("gpus=8, gpu_type=GPUType.H100", "gpus=1, gpu_type=GPUType.A10", "gpus=8, gpu_type=GPUType.B300")


def _keywords(rng: random.Random, members: bool) -> str:
    if members and rng.random() < 0.3:
        return rng.choice(_MEMBER_KEYWORDS)
    return rng.choice(base.OLD_KEYWORDS)[0]


def _split_keywords(rng: random.Random, keywords: str, indent: str) -> str:
    """The keywords over several lines, a comment on the first."""
    parts = [part.strip() for part in keywords.split(",")]
    lines = [f"{indent}    {parts[0]},  # {base._name(rng, 1)} nodes\n"]
    lines += [f"{indent}    {part},\n" for part in parts[1:]]
    return "(\n" + "".join(lines) + f"{indent})"


def _body(rng: random.Random, indent: str) -> str:
    return (
        f'{indent}    """The training entry point, once per rank."""\n'
        f'{indent}    dist.init_process_group("nccl")\n'
        f"{indent}    model = nn.Linear({rng.choice([16, 64, 256])}, {rng.choice([2, 10])}).to(DEVICE)\n"
        f"{indent}    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)\n"
        f"{indent}    for epoch in range(epochs):\n"
        f"{indent}        loss = model(torch.randn(8, model.in_features, device=DEVICE)).square().mean()\n"
        f"{indent}        loss.backward()\n"
        f"{indent}        optimizer.step()\n"
        f"{indent}    dist.destroy_process_group()\n"
        f"{indent}    return loss.item()\n"
    )


def _signature(rng: random.Random, name: str, indent: str = "") -> str:
    return f"{indent}def {name}(epochs: int = {rng.randint(1, 20)}, lr: float = {rng.choice([1e-3, 3e-4])}):\n"


def _use(rng: random.Random, spelling: str, members: bool) -> str:
    """One use of the old decorator, in one of the placements real code has; ends with a blank line."""
    keywords = _keywords(rng, members)
    name = f"run_{base._name(rng)}"
    placement = rng.randrange(8)
    if placement == 0:  # a top-level decorated function
        return f"@{spelling}({keywords})\n" + _signature(rng, name) + _body(rng, "") + "\n\n"
    if placement == 1:  # stacked with other decorators, above and below
        above, below = rng.choice(
            [("log_calls", "torch.no_grad()"), ("functools.lru_cache(maxsize=None)", "log_calls")]
        )
        return f"@{above}\n@{spelling}({keywords})\n@{below}\n" + _signature(rng, name) + _body(rng, "") + "\n\n"
    if placement == 2:  # a method
        return (
            f'class {base._camel(rng)}Job:\n    """Runs the job on the cluster."""\n\n    @staticmethod\n'
            f"    @{spelling}({keywords})\n" + _signature(rng, name, "    ") + _body(rng, "    ") + "\n\n"
        )
    if placement == 3:  # a function defined inside another
        return (
            f"def make_{name}():\n    level = {rng.randint(0, 3)}\n\n    @{spelling}({keywords})\n"
            + _signature(rng, "job", "    ")
            + _body(rng, "    ")
            + "\n    return job\n\n\n"
        )
    if placement == 4:  # the call form
        return _signature(rng, f"{name}_fn") + _body(rng, "") + f"\n\n{name} = {spelling}({keywords})({name}_fn)\n\n\n"
    if placement == 5:  # keywords over several lines, with a comment
        return f"@{spelling}{_split_keywords(rng, keywords, '')}\n" + _signature(rng, name) + _body(rng, "") + "\n\n"
    if placement == 6:  # decorated, then given other resources
        return (
            f"@{spelling}(gpus=1)\n"
            + _signature(rng, name)
            + _body(rng, "")
            + f"\n\nlarger_{name} = {name}.with_overrides({keywords})\n\n\n"
        )
    # an import inside the function that uses it
    return (
        f"def launch_{name}():\n    from serverless_gpu import distributed as nested\n\n"
        f"    @nested({keywords})\n"
        + _signature(rng, "job", "    ")
        + _body(rng, "    ")
        + "\n    return job.distributed()\n\n\n"
    )


_HELPERS = "import functools\n\n\ndef log_calls(function):\n    return function\n\n\n"


@dataclasses.dataclass(frozen=True)
class VariedFile:
    """A generated script that must change, with the number of old keyword sets (``gpus=``) it holds: each becomes
    one ``num_accelerators=``."""

    path: str
    decorators: int


def _imports(rng: random.Random, index: int) -> Tuple[str, str, bool]:
    """One or two import forms (every form in turn), the spelling to use, and whether GPUType is imported."""
    statement, spelling = IMPORT_FORMS[index % len(IMPORT_FORMS)]
    if rng.random() < 0.3:
        extra, _ = rng.choice(IMPORT_FORMS[:5])
        if extra != statement:
            statement += extra
    members = rng.random() < 0.4
    return statement + (_GPU_TYPE_IMPORT if members else ""), spelling, members


def write_placed_files(directory: str, count: int, lines: int, seed: int) -> List[VariedFile]:
    """``count`` scripts of about ``lines`` lines, 2 to 4 uses each, in every placement and import form."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    files = []
    for index in range(count):
        imports, spelling, members = _imports(rng, index)
        uses = rng.randint(2, 4)
        chunks = [_use(rng, spelling, members) for _ in range(uses)]
        while sum(chunk.count("\n") for chunk in chunks) < lines - 30:
            chunks.append(rng.choice(base._BLOCKS)(rng))
        text = base._module_text(rng, chunks, _HELPERS + imports)
        files.append(_write(directory, f"placed_{base._name(rng)}_{index:03d}.py", text))
    return files


def write_sparse_files(directory: str, count: int, lines: int, seed: int) -> List[VariedFile]:
    """``count`` scripts of about ``lines`` lines where the old API is one import and one or two uses."""
    rng = random.Random(seed)
    os.makedirs(directory, exist_ok=True)
    files = []
    for index in range(count):
        imports, spelling, members = _imports(rng, index)
        chunks = [rng.choice(base._BLOCKS)(rng) for _ in range(lines // 22)]
        for _ in range(rng.randint(1, 2)):
            chunks.append(_use(rng, spelling, members))
        text = base._module_text(rng, chunks, _HELPERS + imports)
        files.append(_write(directory, f"sparse_{base._name(rng)}_{index:03d}.py", text))
    return files


def _write(directory: str, name: str, text: str) -> VariedFile:
    ast.parse(text)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return VariedFile(path, old_keywords(text).count("gpus="))


def old_keywords(text: str) -> List[str]:
    """The old keywords (``gpus=``, ``gpu_type=``) of ``text``'s calls; what a migration must leave none of."""
    return [
        f"{node.arg}="
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.keyword) and node.arg in ("gpus", "gpu_type")
    ]


_MAGIC_CELLS: Sequence[Callable[[random.Random], str]] = (
    lambda rng: f"!nvidia-smi\nprint({rng.randint(0, 9)})",
    lambda rng: "files = !ls /dbfs/data\nprint(len(files))",
    lambda rng: "%env NCCL_DEBUG=INFO\n%matplotlib inline",
    lambda rng: "%%bash\nnvidia-smi --query-gpu=name --format=csv",
    lambda rng: "%%capture\nimport torchmetrics",
    lambda rng: f"%run ./setup_{base._name(rng, 1)}",
)


def varied_notebook_cells(count: int, seed: int) -> List[base.NotebookCell]:
    """A notebook's cells: imports of every form in several cells, uses in every placement, magics, markdown."""
    rng = random.Random(seed)
    cells = [
        base.NotebookCell("markdown", "# Distributed training\n\nOn serverless GPUs, every way the API is reached."),
        base.NotebookCell("code", "%pip install serverless_gpu==0.5.0 torchmetrics"),
        base.NotebookCell("code", "dbutils.library.restartPython()"),
        base.NotebookCell("code", base._HEADER_IMPORTS + _HELPERS + base._PRELUDE.strip()),
        base.NotebookCell("code", IMPORT_FORMS[0][0] + _GPU_TYPE_IMPORT.rstrip("\n")),
    ]
    spelling = IMPORT_FORMS[0][1]
    while len(cells) < count:
        roll = rng.random()
        if roll < 0.06:
            statement, spelling = rng.choice(IMPORT_FORMS)
            cells.append(base.NotebookCell("code", statement.rstrip("\n")))
        elif roll < 0.30:
            cells.append(
                base.NotebookCell(
                    "markdown",
                    f"## {base._name(rng).replace('_', ' ').title()}\n\n"
                    f"Results on {rng.choice(base._DATASETS)} follow.",
                )
            )
        elif roll < 0.45:
            text = _use(rng, spelling, members=True).rstrip("\n")
            if rng.random() < 0.25:
                text = "%%time\n" + text
            cells.append(base.NotebookCell("code", text, decorators=old_keywords(_unmagic(text)).count("gpus=")))
        elif roll < 0.55:
            cells.append(base.NotebookCell("code", rng.choice(_MAGIC_CELLS)(rng)))
        else:
            cells.append(base.NotebookCell("code", rng.choice(base._BLOCKS)(rng).rstrip("\n")))
    cells = cells[:count]
    for cell in cells:
        if cell.kind == "code" and not cell.source.lstrip().startswith(("%", "!")) and "= !" not in cell.source:
            ast.parse(_unmagic(cell.source))
    return cells


def _unmagic(text: str) -> str:
    return text[len("%%time\n") :] if text.startswith("%%time\n") else text
