"""Notebooks whose JSON gives a key twice are migrated as every JSON reader reads them (the last value) and written
back with the earlier values where they were; a layout that cannot be written again says where and what to do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from air_migrate.cli import main
from air_migrate.notebook_json import DuplicateKeys, NotebookJson, NotebookJsonError

SUMMARY = "air-migrate: 1 file(s) scanned, 1 mention serverless_gpu, its keywords or TorchDistributor, "

# As Databricks exports one: a cell's metadata and the notebook's given twice, and a code cell with two sources.
DUPLICATED = """{
 "cells": [
  {
   "cell_type": "code",
   "execution_count": null,
   "metadata": {
    "application/vnd.databricks.v1+cell": {
     "title": "old"
    },
    "application/vnd.databricks.v1+cell": {
     "title": "setup"
    }
   },
   "outputs": [],
   "source": [
    "from serverless_gpu import distributed\\n"
   ]
  },
  {
   "cell_type": "code",
   "execution_count": null,
   "metadata": {},
   "outputs": [],
   "source": "@distributed(gpus=4, gpu_type='A10')\\ndef f(): ...",
   "source": "@distributed(gpus=1, gpu_type='A10')\\ndef f(): ..."
  }
 ],
 "metadata": {
  "language": "python"
 },
 "metadata": {
  "language_info": {
   "name": "python"
  }
 },
 "nbformat": 4,
 "nbformat_minor": 5
}
"""
MIGRATED = DUPLICATED.replace('"from serverless_gpu import', '"from databricks.air import').replace(
    "(gpus=1, gpu_type='A10')", "(num_accelerators=1, accelerator_type='GPU_1xA10')"
)


def test_a_duplicate_key_reads_as_its_last_value_and_writes_back_as_it_was() -> None:
    notebook_json, document = NotebookJson.read(DUPLICATED.encode())
    assert notebook_json.duplicates and isinstance(document, DuplicateKeys)
    assert document == json.loads(DUPLICATED)  # what every JSON reader sees
    assert notebook_json.dump(notebook_json.load()) == DUPLICATED.encode()
    changed = notebook_json.load()
    changed["cells"][1]["source"] = "x = 1"
    assert (
        notebook_json.dump(changed)
        == DUPLICATED.replace("\"@distributed(gpus=1, gpu_type='A10')\\ndef f(): ...\"", '"x = 1"').encode()
    )


def test_a_notebook_with_duplicate_keys_is_migrated_in_place_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "exported.ipynb"
    path.write_text(DUPLICATED)
    assert main([str(path)]) == 0
    assert path.read_text() == MIGRATED  # the earlier values (the first source too) kept, byte for byte
    err = capsys.readouterr().err
    assert SUMMARY + "1 changed (4 change(s)), 0 item(s) need a person, 0 failed" in err
    assert main(["--check", str(path)]) == 0  # what a reader runs is migrated; nothing is left to do


def test_its_json_diff_applies_with_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    Path("exported.ipynb").write_text(DUPLICATED)
    assert main(["--diff=json", "exported.ipynb"]) == 1
    applied = subprocess.run(["git", "apply", "-"], input=capsys.readouterr().out, text=True, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert Path("exported.ipynb").read_text() == MIGRATED


def test_a_layout_that_cannot_be_written_again_says_where_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = DUPLICATED.replace('   "outputs": [],\n   "source": "@', '\t"outputs": [],\n   "source": "@')
    path = tmp_path / "exported.ipynb"
    path.write_text(data)
    with pytest.raises(NotebookJsonError, match=r"at line 23, column 1\b"):
        NotebookJson.read(data.encode())
    assert main(["--check", str(path)]) == 3
    err = capsys.readouterr().err
    assert (
        f"{path}: error: its JSON layout cannot be reproduced exactly (it differs from how it would be written "
        "again at line 23, column 1), so it is left as it is: save it once with Jupyter or `jupyter nbconvert "
        "--to notebook --inplace`, then run air-migrate again"
    ) in err
    assert SUMMARY + "0 would change (0 change(s)), 0 item(s) need a person, 1 failed" in err
    assert path.read_text() == data


def test_a_notebook_without_duplicates_is_read_without_the_pairs_hook() -> None:
    data = json.dumps(json.loads(DUPLICATED), indent=1) + "\n"
    notebook_json, document = NotebookJson.read(data.encode())
    assert not notebook_json.duplicates and type(document) is dict
