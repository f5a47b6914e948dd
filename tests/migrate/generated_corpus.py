"""A generated corpus of old code, in the shapes public notebooks reach the old API (issue 16, "Tests"): every import
path of ``distributed`` and ``ray_launch`` (the package, ``serverless_gpu.launcher``, ``serverless_gpu.ray``,
``serverless_gpu.api``, aliases, ``import ... as``), every way a GPU type or count reaches them (a literal in any
spelling the runtime accepts, a name bound in the same cell or an earlier one, annotated, a ``GPUType`` member), and
every binding form of a ``TorchDistributor`` and its count (bound once, chained, rebound per cell, in one cell or in
a function, a count held in a name at module level, annotated, or local to a function), with comments inside what
goes.

Each :class:`Case` says whether one write must leave it fully migrated (``clean``), and whether its script runs as it
is under ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU`` (``runs``: decorators only, no ``TorchDistributor``). The negative
cases are shapes the tool must not call done: a name also used for something else, bound twice or after its use, a
count it cannot know, a model it does not know, a count name rebound, a rebound distributor run from a function.

Seeded, so a failure can be reproduced: ``cases(seed)`` gives the same cases for the same seed.
"""

from __future__ import annotations

import dataclasses
import random
from typing import List, Sequence, Tuple

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

IMPORT_FORMS: List[Tuple[str, str]] = [
    ("from serverless_gpu import distributed", "distributed"),
    ("from serverless_gpu import distributed as launch", "launch"),
    ("import serverless_gpu", "serverless_gpu.distributed"),
    ("import serverless_gpu as sg", "sg.distributed"),
    ("from serverless_gpu.launcher import distributed", "distributed"),
    ("from serverless_gpu.launcher import distributed as run_on", "run_on"),
    ("import serverless_gpu.launcher as launcher", "launcher.distributed"),
    ("import serverless_gpu.launcher", "serverless_gpu.launcher.distributed"),
    ("from serverless_gpu import launcher", "launcher.distributed"),
    ("from serverless_gpu.api import distributed", "distributed"),
    ("import serverless_gpu.api as sgc", "sgc.distributed"),
    ("from serverless_gpu import ray_launch", "ray_launch"),
    ("from serverless_gpu.ray import ray_launch", "ray_launch"),
    ("from serverless_gpu.ray import ray_launch as rl", "rl"),
    ("import serverless_gpu.ray as sray", "sray.ray_launch"),
    ("import serverless_gpu.ray", "serverless_gpu.ray.ray_launch"),
    ("from serverless_gpu import ray", "ray.ray_launch"),
]
"""``(import statement, how the decorator is spelled through it)``."""
SPELLINGS = {
    "H100": ["H100", "h100", "h100_80gb", " H100 "],
    "A10": ["A10", "a10", "A10G", "a10g"],
    "B300": ["B300", "b300"],
}
"""Every spelling of each old model the runtime accepts."""
TYPE_FORMS = [
    "literal",
    "name, same cell",
    "name, earlier cell",
    "annotated name",
    "count by name",
    "count and type by name",
    "GPUType member",
    "new keyword, old value by name",
]
NEGATIVE_TYPE_FORMS = [
    "name also printed",
    "name bound twice",
    "count unknown",
    "name bound after use",
    "unknown model",
]
TD_FORMS = [
    "chained",
    "assigned once, run in a later cell",
    "rebound per cell",
    "rebound in one cell",
    "rebound in a function",
    "device count by name",
    "device count by annotated name",
    "device count local to a function",
    "multi-line distributor with comments",
]
NEGATIVE_TD_FORMS = ["device count name rebound", "rebound distributor run from a function"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One generated notebook: its code cells, and what one write must make of it."""

    name: str
    cells: Tuple[str, ...]
    clean: bool
    """One write leaves no old API at all, and ``--check`` passes."""
    runs: bool
    """The script runs as it is (decorators only), before and after the write."""
    spark_setup: bool = False
    """It builds a Spark session, which a person must judge (AM217): its marker keeps ``--check`` failing after the
    write, though no old API is left."""

    def script(self) -> str:
        return "\n\n".join(cell.rstrip("\n") for cell in self.cells) + "\n"

    def databricks(self) -> str:
        return "# Databricks notebook source\n" + "\n\n# COMMAND ----------\n\n".join(
            cell.rstrip("\n") + "\n" for cell in self.cells
        )

    def ipynb(self) -> str:
        notebook = new_notebook(
            cells=[new_code_cell(cell.rstrip("\n")) for cell in self.cells],
            metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
        )
        for number, cell in enumerate(notebook.cells, start=1):
            cell.id = f"cell-{number}"
        return nbformat.writes(notebook) + "\n"


def cases(seed: int = 16) -> List[Case]:
    """Every form at least once: the positive type forms and the import forms in turn, two functions a file; each
    negative form in a file of its own; each ``TorchDistributor`` form in a file of its own."""
    rng = random.Random(seed)
    made: List[Case] = []
    count = max(len(IMPORT_FORMS), len(TYPE_FORMS))
    for index in range(count):
        import_line, decorator = IMPORT_FORMS[index % len(IMPORT_FORMS)]
        forms = [TYPE_FORMS[index % len(TYPE_FORMS)], TYPE_FORMS[(index + 3) % len(TYPE_FORMS)]]
        made.append(_launcher_case(f"launcher_{index:02d}", import_line, decorator, forms, rng))
    for index, form in enumerate(NEGATIVE_TYPE_FORMS):
        import_line, decorator = IMPORT_FORMS[(index * 5 + 2) % len(IMPORT_FORMS)]
        made.append(_launcher_case(f"negative_{index:02d}", import_line, decorator, [form], rng))
    for index, form in enumerate(TD_FORMS + NEGATIVE_TD_FORMS):
        made.append(_torch_distributor_case(f"spark_{index:02d}", form, rng, builder=index % 3 == 0))
    return made


_COUNTS = {"H100": [1, 8, 16], "A10": [1, 2, 4], "B300": [8, 16]}
"""Counts that each model has a shape for (remote runs check them)."""


def _model_and_count(rng: random.Random, h100: bool = False) -> Tuple[str, str, int]:
    model = "H100" if h100 else rng.choice(sorted(SPELLINGS))
    return model, rng.choice(SPELLINGS[model]), rng.choice(_COUNTS[model])


def _launcher_case(name: str, import_line: str, decorator: str, forms: Sequence[str], rng: random.Random) -> Case:
    imports = [import_line]
    settings: List[str] = []
    functions: List[str] = []
    clean, runs = True, True
    remote = ", remote=True" if "ray_launch" in decorator else ""
    for number, form in enumerate(forms):
        model, spelling, count = _model_and_count(rng, h100=form in ("count by name", "count unknown"))
        type_name, count_name = f"GPU_TYPE_{number}", f"NUM_GPUS_{number}"
        type_value, count_value, here, keyword = repr(spelling), str(count), [], "gpu_type"
        if form == "name, same cell":
            here.append(f"{type_name} = {spelling!r}")
            type_value = type_name
        elif form in ("name, earlier cell", "count and type by name", "name also printed"):
            settings.append(f"{type_name} = {spelling!r}")
            type_value = type_name
        elif form == "annotated name":
            settings.append(f"{type_name}: str = {spelling!r}  # the old model")
            type_value = type_name
        elif form == "new keyword, old value by name":
            settings.append(f"{type_name} = {spelling!r}")
            type_value, keyword = type_name, "accelerator_type"
        elif form == "GPUType member":
            imports.append("from serverless_gpu.compute import GPUType")
            type_value = f"GPUType.{model}"
        elif form == "name bound twice":
            settings.append(f"{type_name} = {spelling!r}\n{type_name} = {spelling!r}")
            type_value, clean = type_name, False
        elif form == "name bound after use":
            type_value, clean, runs = type_name, False, False
        elif form == "unknown model":
            type_value, clean, runs = repr("H200"), False, False
        if form in ("count by name", "count and type by name"):
            settings.append(f"{count_name} = {count}")
            count_value = count_name
        if form == "count unknown":
            imports.append("import os")
            settings.append(f'{count_name} = int(os.environ.get("NUM_GPUS", "8"))')
            count_value, clean = count_name, False
        if form == "name also printed":
            here.append(f'print("on", {type_name})')
            clean = False
        body = "\n".join(
            [
                *here,
                f"@{decorator}(gpus={count_value}, {keyword}={type_value}{remote})",
                f"def train_{number}():",
                f"    return {number}",
            ]
        )
        functions.append(body)
        if form == "name bound after use":
            functions.append(f"{type_name} = {spelling!r}")
    cells = ["\n".join(imports)] + (["\n".join(settings)] if settings else []) + functions
    return Case(name, tuple(cells), clean, runs)


_TD_IMPORT = "import torch\nfrom pyspark.ml.torch.distributor import TorchDistributor"
_BUILDER = (
    "from pyspark.sql import SparkSession\nbuilder = SparkSession.builder.appName('train')\n"
    "spark = builder.getOrCreate()"
)
_FUNCTIONS = "# The training loop.\ndef train(epochs):\n    return epochs\n\n\ndef evaluate():\n    return 0"


def _torch_distributor_case(name: str, form: str, rng: random.Random, builder: bool) -> Case:
    first = rng.choice([2, 4, 8])
    second = rng.choice([1, 2, 4])
    cells: List[str] = [_TD_IMPORT + ("\n" + _BUILDER if builder else ""), _FUNCTIONS]
    clean = True
    if form == "chained":
        cells.append(f"loss = TorchDistributor(num_processes={first}, local_mode=True, use_gpu=True).run(train, 3)")
    elif form == "assigned once, run in a later cell":
        cells += [
            f"distributor = TorchDistributor({first})  # {first} ranks",
            "distributor.run(train, 1)\ndistributor.run(train, 2)",
        ]
    elif form == "rebound per cell":
        cells += [
            f"d = TorchDistributor(num_processes={first})\nd.run(train, 1)",
            f"d = TorchDistributor(num_processes={second})\nd.run(evaluate)",
        ]
    elif form == "rebound in one cell":
        cells.append(f"d = TorchDistributor({first})\nd.run(train, 1)\nd = TorchDistributor({second})\nd.run(evaluate)")
    elif form == "rebound in a function":
        cells.append(
            f"def main():\n    d = TorchDistributor({first})\n    d.run(train, 1)\n"
            f"    d = TorchDistributor({second})\n    d.run(evaluate)"
        )
    elif form == "device count by name":
        cells[0] += "\nn = torch.cuda.device_count()"
        cells.append('print(f"{n} GPUs")\nTorchDistributor(num_processes=n).run(train, 2)')
    elif form == "device count by annotated name":
        cells.append("gpus: int = torch.cuda.device_count()\nTorchDistributor(gpus, True, True).run(train, 2)")
    elif form == "device count local to a function":
        cells.append(
            "def main():\n    count = torch.cuda.device_count()\n"
            "    return TorchDistributor(num_processes=count).run(train, 2)"
        )
    elif form == "multi-line distributor with comments":
        cells.append(
            f"distributor = TorchDistributor(\n    num_processes={first},  # one per GPU\n"
            "    # on this node only\n    local_mode=True,\n)  # built once\n"
            "distributor.run(  # go\n    train,  # the function\n    5,\n)"
        )
    elif form == "device count name rebound":
        cells[0] += "\nn = torch.cuda.device_count()\nn = n // 2"
        cells.append("TorchDistributor(num_processes=n).run(train, 2)")
        clean = False
    elif form == "rebound distributor run from a function":
        cells += [
            f"d = TorchDistributor({first})\nd.run(train, 1)",
            "def later():\n    d.run(evaluate)",
            f"d = TorchDistributor({second})\nd.run(evaluate)",
        ]
        clean = False
    return Case(name, tuple(cells), clean, runs=False, spark_setup=builder)
