"""The air-migrate command: files found, modes, exit codes, reports, safe writes, and notebooks end to end."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from air_migrate.cli import main

SCRIPT = 'from serverless_gpu import distributed  # keep me\n\n@distributed(gpus=8, gpu_type="H100")\ndef train(): ...\n'
SCRIPT_AFTER = (
    'from databricks.air import distributed  # keep me\n\n'
    '@distributed(num_accelerators=8, accelerator_type="GPU_8xH100")\ndef train(): ...\n'
)
DATABRICKS = (
    "# Databricks notebook source\n# MAGIC %pip install serverless_gpu\n\n# COMMAND ----------\n\n"
    "from serverless_gpu import distributed\n\n# COMMAND ----------\n\n"
    '@distributed(gpus=1, gpu_type="H100")\ndef f(): ...\n'
)


def _notebook() -> str:
    nb = new_notebook(
        cells=[
            new_code_cell("%pip install torch\nfrom serverless_gpu import distributed"),
            new_code_cell("%%bash\necho hi"),
            new_code_cell('@distributed(gpus=2, gpu_type="A10")\ndef f():\n    return 1'),
        ],
        metadata={"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}},
    )
    return nbformat.writes(nb) + "\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "nb.py").write_text(DATABRICKS)
    (tmp_path / "nb.ipynb").write_text(_notebook())
    (tmp_path / "plain.py").write_text("x = 1\n")
    checkpoints = tmp_path / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / "train.py").write_text(SCRIPT)
    return tmp_path


def test_write_mode_migrates_every_format_and_leaves_the_rest_alone(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain_mtime = (tree / "plain.py").stat().st_mtime_ns
    assert main([str(tree)]) == 0
    assert (tree / "train.py").read_text() == SCRIPT_AFTER
    assert (tree / "nb.py").read_text() == DATABRICKS.replace("from serverless_gpu", "from databricks.air").replace(
        '(gpus=1, gpu_type="H100")', '(num_accelerators=1, accelerator_type="GPU_1xH100")'
    )
    cells = json.loads((tree / "nb.ipynb").read_text())["cells"]
    assert "".join(cells[0]["source"]) == "%pip install torch\nfrom databricks.air import distributed"
    assert "".join(cells[2]["source"]).startswith('@distributed(num_accelerators=2, accelerator_type="GPU_1xA10")')
    assert (tree / ".ipynb_checkpoints" / "train.py").read_text() == SCRIPT  # never touched
    assert (tree / "plain.py").stat().st_mtime_ns == plain_mtime  # unchanged files are not rewritten
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert f"{tree}/nb.ipynb:cell 1:2:1: AM101 change from serverless_gpu import -> from databricks.air import" in lines
    assert any(line.startswith(f"{tree}/nb.ipynb:cell 2:1:1: AM901 ") for line in lines)
    assert f"{tree}/nb.py:cell 3:10:14: AM102 change gpus= -> num_accelerators=" in lines
    assert f"{tree}/train.py:3:51: AM103 change 'H100' -> 'GPU_8xH100'" in lines
    assert lines == sorted(lines, key=lambda line: line.split(":")[0])  # in path order
    assert "4 file(s) scanned, 3 mention serverless_gpu or its keywords, 3 changed" in err
    # A second run changes nothing and reports no change.
    assert main([str(tree)]) == 0
    out, err = capsys.readouterr()
    assert "AM10" not in out and "0 changed (0 change(s))" in err


def test_check_and_diff_write_nothing_and_exit_1(
    tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    assert main(["--check", "train.py"]) == 1
    assert "train.py: would change" in capsys.readouterr().out
    assert main(["--diff", "."]) == 1
    diff = "".join(line + "\n" for line in capsys.readouterr().out.splitlines() if not line.startswith("./"))
    assert (tree / "train.py").read_text() == SCRIPT
    assert "--- a/train.py" in diff and "+++ b/nb.ipynb" in diff
    applied = subprocess.run(["git", "apply", "--check", "-"], input=diff, text=True, capture_output=True)
    assert applied.returncode == 0, applied.stderr


def test_a_file_with_a_blocking_item_is_left_unchanged_unless_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    source = 'from serverless_gpu import distributed\n\n@distributed(gpus=4, gpu_type="H100")\ndef f(): ...\n'
    path.write_text(source)
    assert main([str(path)]) == 0
    assert path.read_text() == source
    assert main(["--check", str(path)]) == 1
    assert "AM105 blocking 'H100' with 4 GPUs has no accelerator type" in capsys.readouterr().out
    assert main(["--partial", str(path)]) == 0
    assert path.read_text() == source.replace("from serverless_gpu", "from databricks.air").replace(
        "gpus=4, gpu_type=", "num_accelerators=4, accelerator_type="
    )


def test_a_file_that_cannot_be_read_is_reported_and_the_others_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.py").write_bytes(b"# serverless_gpu caf\xe9\n")
    (tmp_path / "good.py").write_text(SCRIPT)
    assert main([str(tmp_path)]) == 3
    assert (tmp_path / "good.py").read_text() == SCRIPT_AFTER
    assert f"{tmp_path}/bad.py: error: not UTF-8" in capsys.readouterr().err


def test_writes_keep_mode_bits_and_symlinks(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_text(SCRIPT)
    target.chmod(0o751)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    assert main([str(link)]) == 0
    assert link.is_symlink() and target.read_text() == SCRIPT_AFTER
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".air-migrate-")] == []


def test_select_ignore_and_bad_codes(tmp_path: Path) -> None:
    path = tmp_path / "t.py"
    path.write_text(SCRIPT)
    assert main(["--select", "AM101", str(path)]) == 0
    assert path.read_text() == SCRIPT.replace("from serverless_gpu", "from databricks.air")
    with pytest.raises(SystemExit) as usage:
        main(["--select", "AM999", str(path)])
    assert usage.value.code == 2


def test_it_runs_as_a_module_and_lists_its_rules() -> None:
    done = subprocess.run([sys.executable, "-m", "air_migrate", "--list-rules"], capture_output=True, text=True)
    assert done.returncode == 0
    assert [line.split()[0] for line in done.stdout.splitlines()][:3] == ["AM101", "AM102", "AM103"]


def test_pip_installs_of_serverless_gpu_are_reported_and_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = new_notebook(cells=[new_code_cell("!pip install -q serverless-gpu torch"), new_code_cell("x = 1")])
    (tmp_path / "a.ipynb").write_text(nbformat.writes(nb) + "\n")
    (tmp_path / "b.py").write_text(DATABRICKS)
    before = (tmp_path / "a.ipynb").read_text()
    assert main(["--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert f"{tmp_path}/a.ipynb:cell 1:1:1: AM110 manual installs serverless_gpu: install databricks-air-oss instead " \
           "(databricks-sdk-air on Databricks); automatic rewriting of pip lines is not available yet" in out
    assert any(line.startswith(f"{tmp_path}/b.py:cell 1:2:1: AM110") for line in out)
    assert main([str(tmp_path)]) == 0  # reported, not blocking: b.py's code is migrated, the pip lines stay
    assert (tmp_path / "a.ipynb").read_text() == before
    assert "# MAGIC %pip install serverless_gpu\n" in (tmp_path / "b.py").read_text()
    assert "from databricks.air import distributed" in (tmp_path / "b.py").read_text()
