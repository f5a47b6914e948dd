"""The examples run as a user runs them (``python examples/<name>.py`` in a fresh working directory), and what every
training example's result must show. Shared by ``test_frameworks.py`` (2 CPU ranks) and ``test_gpu.py`` (every GPU).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List

from process_helpers import processes_with_marker, wait_until

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
SCRIPT_TIMEOUT = 300  # seconds; each example takes 10-40 s on 2 cores


def run_example(name: str, cwd: Path, gpus: int = 0) -> List[Dict[str, Any]]:
    """Run ``examples/<name>.py``; return its per-rank results (its last line of output).

    On 2 CPU ranks by default; with ``gpus``, on every GPU (the example's own choice when it sees them).
    """
    marker = uuid.uuid4().hex
    env = {**os.environ, "DATABRICKS_AIR_MLFLOW": "0", "AIR_TEST_MARKER": marker}
    for variable in ("DATABRICKS_AIR_ACCELERATOR_TYPE", "MASTER_ADDR", "MASTER_PORT", "CHECKPOINT_PATH"):
        env.pop(variable, None)
    env.pop("CHECKPOINT_DIR", None)
    if not gpus:
        env["DATABRICKS_AIR_ACCELERATOR_TYPE"] = "CPU"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT,
    )
    assert done.returncode == 0, f"{name}.py failed:\n{done.stdout}\n{done.stderr}"
    # The idle rank server exits with the script, after unloading torch: give it a moment.
    assert wait_until(lambda: not processes_with_marker(marker), timeout=30), "the example left processes behind"
    results = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    ranks = gpus or 2
    assert [r["rank"] for r in results] == list(range(ranks))
    assert [r["world_size"] for r in results] == [ranks] * ranks
    assert [r["device"] for r in results] == ([f"cuda:{i}" for i in range(gpus)] if gpus else ["cpu", "cpu"])
    return results


def assert_converged_and_agree(results: List[Dict[str, Any]]) -> None:
    losses = results[0]["losses"]
    assert losses[-1] < 0.5 * losses[0], f"the loss did not fall enough: {losses}"
    # Every rank reports the loss averaged over all ranks, and ends with the same weights.
    assert all(r["losses"] == losses for r in results)
    assert len({r["checksum"] for r in results}) == 1, [r["checksum"] for r in results]


def load_example_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
