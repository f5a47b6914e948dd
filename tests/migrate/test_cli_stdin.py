"""``-`` reads standard input: the format comes from --stdin-filename and the content, the code goes to stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_fixtures import DATABRICKS, DATABRICKS_AFTER, NOTEBOOK, SCRIPT, SCRIPT_AFTER, engine_lines, feed_stdin

from air_migrate.cli import main


def test_a_script_comes_back_migrated_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = ("\ufeff" + SCRIPT.replace("\n", "\r\n")).encode()  # BOM and CRLF survive
    feed_stdin(monkeypatch, data)
    assert main(["--stdin-filename", "src/train.py", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == ("\ufeff" + SCRIPT_AFTER.replace("\n", "\r\n")).encode()
    assert (
        err.decode().splitlines()[0] == "src/train.py:1:1: AM101 change from serverless_gpu import -> "
        "from databricks.air import"
    )


def test_a_databricks_source_is_known_by_its_first_line(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, DATABRICKS.encode())
    assert main(["--stdin-filename", "nb.py", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == DATABRICKS_AFTER.encode()
    assert err.decode().splitlines()[:-1] == engine_lines("nb.py", DATABRICKS.encode())
    assert err.decode().startswith("nb.py:cell 2:6:1: AM101 change ")  # the cell, and the line in the file


def test_a_notebook_is_known_by_its_name(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, NOTEBOOK.encode())
    assert main(["--stdin-filename", "nb.ipynb", "-"]) == 0
    out, err = capsysbinary.readouterr()
    cells = json.loads(out)["cells"]
    assert "".join(cells[1]["source"]) == "%pip install torch\nfrom databricks.air import distributed"
    assert out.decode() == NOTEBOOK.replace("from serverless_gpu", "from databricks.air").replace(
        '@distributed(gpus=2, gpu_type=\\"A10\\")', '@distributed(num_accelerators=2, accelerator_type=\\"GPU_1xA10\\")'
    )
    assert err.decode().startswith("nb.ipynb:cell 2:2:1: AM101 change ")  # the line within the cell


def test_without_a_name_a_notebook_is_known_by_its_content_and_reported_as_dash(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, NOTEBOOK.encode())
    assert main(["--check", "-"]) == 1
    out, err = capsysbinary.readouterr()
    assert out == b""
    assert err.decode().startswith("-:cell 2:2:1: AM101 change ")
    assert "-: would change\n" in err.decode()


def test_a_py_name_wins_over_json_looking_content(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, NOTEBOOK.encode())
    assert main(["--stdin-filename", "data.py", "-"]) == 0  # read as a script: a dict literal holding strings
    out, err = capsysbinary.readouterr()
    assert out == NOTEBOOK.encode()
    assert " change " not in err.decode() and "data.py:19:5: AM101 info a string mentions" in err.decode()


def test_the_diff_of_a_notebook_on_stdin_is_per_cell(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, NOTEBOOK.encode())
    assert main(["--diff", "--stdin-filename", "nb.ipynb", "-"]) == 1
    out = capsysbinary.readouterr().out.decode()
    assert out.startswith("--- nb.ipynb:cell 2\n+++ nb.ipynb:cell 2\n@@ -1,2 +1,2 @@\n %pip install torch\n")


def test_it_works_through_real_pipes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "air_migrate", "--stdin-filename", "job.py", "-"],
        input=SCRIPT.encode(),
        capture_output=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == SCRIPT_AFTER.encode()
    assert done.stderr.decode().endswith("1 changed (4 change(s)), 0 item(s) need a person, 0 failed\n")
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
