"""The pre-commit hook in ``.pre-commit-hooks.yaml``: well formed, pointing at our command, and run the way
pre-commit runs it (its ``entry`` and ``args`` followed by the staged file names)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
OLD_SCRIPT = 'from serverless_gpu import distributed\n\n@distributed(gpus=8, gpu_type="H100")\ndef train(): ...\n'
NEW_SCRIPT = (
    "from databricks.air import distributed\n\n"
    '@distributed(num_accelerators=8, accelerator_type="GPU_8xH100")\ndef train(): ...\n'
)


def _hooks() -> List[Dict[str, Any]]:
    with open(ROOT / ".pre-commit-hooks.yaml", encoding="utf-8") as stream:
        return yaml.safe_load(stream)


def _hook() -> Dict[str, Any]:
    (hook,) = [hook for hook in _hooks() if hook["id"] == "air-migrate"]
    return hook


def test_the_hook_file_declares_one_python_hook_for_scripts_and_notebooks() -> None:
    hooks = _hooks()
    assert isinstance(hooks, list) and [hook["id"] for hook in hooks] == ["air-migrate"]
    hook = hooks[0]
    assert {"id", "name", "entry", "language"} <= set(hook)
    assert hook["language"] == "python"
    assert hook["types_or"] == ["python", "jupyter"]
    assert "types" not in hook  # types would AND with types_or and drop the notebooks
    # types_or arrived in pre-commit 2.9.0.
    assert tuple(int(part) for part in hook["minimum_pre_commit_version"].split(".")) >= (2, 9, 0)


def test_the_entry_is_a_console_script_of_this_distribution_in_write_mode() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as stream:
        scripts = tomllib.load(stream)["project"]["scripts"]
    words = shlex.split(_hook()["entry"])
    assert words[0] in scripts
    assert scripts[words[0]] == "air_migrate.cli:main"
    options = words[1:] + list(_hook().get("args", []))
    # pre-commit needs a failing exit when files were rewritten, and must not get a mode that writes nothing.
    assert "--exit-nonzero-on-change" in words  # in entry, so that a user's own args cannot drop it
    assert not {"--check", "--diff", "--out-dir"} & set(options)


def _run_hook(files: List[Path], cwd: Path) -> subprocess.CompletedProcess:
    hook = _hook()
    words = shlex.split(hook["entry"])
    executable = Path(sys.executable).with_name(words[0])
    command = [str(executable), *words[1:], *hook.get("args", []), *(str(f.relative_to(cwd)) for f in files)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


def _notebook(source: str) -> str:
    document = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1) + "\n"


def test_the_hook_rewrites_staged_files_fails_once_then_passes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(OLD_SCRIPT)
    notebook = tmp_path / "train.ipynb"
    notebook.write_text(_notebook(OLD_SCRIPT))
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")

    first = _run_hook([script, notebook, plain], tmp_path)
    assert first.returncode == 1, first.stderr  # files changed: pre-commit shows the hook as failed
    assert script.read_text() == NEW_SCRIPT
    assert json.loads(notebook.read_text())["cells"][0]["source"] == NEW_SCRIPT
    assert plain.read_text() == "x = 1\n"
    assert "train.py:1:1: AM101" in first.stdout

    second = _run_hook([script, notebook, plain], tmp_path)
    assert (second.returncode, second.stdout) == (0, ""), second.stderr


def test_the_hook_fails_and_leaves_a_file_that_needs_a_person(tmp_path: Path) -> None:
    blocked = 'from serverless_gpu import distributed\n\n@distributed(gpus=4, gpu_type="H100")\ndef f(): ...\n'
    script = tmp_path / "train.py"
    script.write_text(blocked)
    result = _run_hook([script], tmp_path)
    assert result.returncode == 1
    assert script.read_text() == blocked
    assert "AM105 blocking" in result.stdout
