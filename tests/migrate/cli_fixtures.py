"""Inputs shared by the command-line tests, and the engine's own view of them (to compare the CLI's output with)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Dict, List

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.codes import select_rules
from air_migrate.results import FileResult
from air_migrate.runner import Options, migrate_bytes

SCRIPT = (
    'from serverless_gpu import distributed  # keep me\n\n@distributed(gpus=8, gpu_type="H100")\ndef train(): ...\n'
)
SCRIPT_AFTER = (
    "from databricks.air import distributed  # keep me\n\n"
    '@distributed(num_accelerators=8, accelerator_type="GPU_8xH100")\ndef train(): ...\n'
)
DATABRICKS = (
    "# Databricks notebook source\n# MAGIC %pip install torch\n\n# COMMAND ----------\n\n"
    "from serverless_gpu import distributed\n\n# COMMAND ----------\n\n"
    '@distributed(gpus=1, gpu_type="H100")\ndef f(): ...\n'
)
DATABRICKS_AFTER = DATABRICKS.replace("from serverless_gpu", "from databricks.air").replace(
    '(gpus=1, gpu_type="H100")', '(num_accelerators=1, accelerator_type="GPU_1xH100")'
)
# Not rewritten, needs a person, nothing blocks: a dynamic import.
MANUAL = 'import importlib\nmodule = importlib.import_module("serverless_gpu")\n'
# A count with no accelerator type for its model blocks the whole file.
BLOCKED = 'from serverless_gpu import distributed\n\n@distributed(gpus=4, gpu_type="H100")\ndef f(): ...\n'
CLEAN = "import torch\n\nx = torch.zeros(3)\n"
NOT_UTF8 = b"# serverless_gpu caf\xe9\n"
NOT_UTF8_ADVICE = (
    "if it is in another encoding, declare it on its first or second line, e.g. `# -*- coding: latin-1 -*-` (PEP 263)"
)


def notebook(*sources: str, markdown_first: bool = True) -> str:
    """A Python notebook in nbformat's own style, code cells from ``sources`` (after a markdown cell)."""
    cells = [new_markdown_cell("# Training")] if markdown_first else []
    cells += [new_code_cell(source) for source in sources]
    nb = new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    )
    return nbformat.writes(nb) + "\n"


NOTEBOOK = notebook(
    "%pip install torch\nfrom serverless_gpu import distributed",
    "x = 1",
    '@distributed(gpus=2, gpu_type="A10")\ndef f():\n    return 1',
)


def engine_result(shown_path: str, data: bytes) -> FileResult:
    """What the engine itself gives for ``data`` named ``shown_path`` (all rules, default options)."""
    return migrate_bytes(shown_path, data, Options(tuple(select_rules("", ""))))


def engine_lines(shown_path: str, data: bytes) -> List[str]:
    """The report lines the engine's records make for that input, in report order."""
    return [str(record) for record in engine_result(shown_path, data).records]


def write_tree(root: Path, files: Dict[str, object]) -> Path:
    """Create ``files`` (relative path -> text or bytes) under ``root``."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(str(content))
    return root


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make ``data`` the process's standard input, for an in-process ``main(["-"])``."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
