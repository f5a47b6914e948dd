"""docs/data.md's examples run: DDP over a folder on 2 CPU ranks, a resume through DCP, a checkpoint round trip.

The page's python blocks run in page order in one fresh process (the documentation convention), in an empty
working folder, with CPU ranks and no MLflow tracking, as ``tests/test_docs.py`` runs every page.
"""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys
from pathlib import Path

from docs_blocks import read_page
from process_helpers import run_or_show_stacks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "data.md"
RUNNER = ROOT / "tests" / "docs_runner.py"


@pytest.mark.slow
def test_the_data_page_examples_run_on_two_cpu_ranks(tmp_path: Path) -> None:
    page = read_page(PAGE)
    blocks = [
        {"number": number, "line": block.line, "language": block.language, "code": block.code}
        for number, block in enumerate(page.executed_blocks, start=1)
    ]
    assert any("distributed(" in block["code"] for block in blocks)
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps({"page": "docs/data.md", "blocks": blocks}))
    work = tmp_path / "work"
    work.mkdir()
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MLFLOW_", "DATABRICKS_AIR_", "PYTEST_"))
    }
    environ.update(
        DATABRICKS_AIR_ACCELERATOR_TYPE="CPU", DATABRICKS_AIR_MLFLOW="0", DATABRICKS_AIR_LOG_DIR=str(tmp_path / "logs")
    )
    done = run_or_show_stacks(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=work,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-8000:]
    assert "[17, 17] [9, 9]" in done.stdout
    assert "'.checksums.json', '.metadata', '__0_0.distcp'" in done.stdout
