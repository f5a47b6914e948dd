"""Scripts in the encoding their PEP 263 coding line declares: read in it, migrated, written back in it, diffed in
it; what cannot be read or written in it is an error that says what to do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import libcst
import pytest

from cli_fixtures import feed_stdin

from air_migrate.cli import main
from air_migrate.engine import migrate_file
from air_migrate.rules import REGISTRY, Rule
from air_migrate.sources import DatabricksFile, PythonFile, SourceError, coding_line, read_source

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
OLD = "from serverless_gpu import distributed\n\n@distributed(gpus=8, gpu_type='H100')\ndef train(): ...\n"
NEW = (
    "from databricks.air import distributed\n\n@distributed(num_accelerators=8, accelerator_type='GPU_8xH100')\n"
    "def train(): ...\n"
)
LATIN = "# -*- coding: latin-1 -*-\n# Entraînement réparti, café compris\n"


@pytest.mark.parametrize(
    "head, encoding",
    [
        ("# -*- coding: latin-1 -*-\n", "latin-1"),
        ("#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\n", "cp1252"),
        ("\n# coding=iso-8859-15\n", "iso-8859-15"),
    ],
)
def test_a_coding_line_on_line_one_or_two_is_the_scripts_encoding(head: str, encoding: str) -> None:
    data = (head + "# é à ü € ?\n" + OLD).encode(encoding, errors="replace")
    assert coding_line(data) == encoding
    source = read_source("job.py", data)
    assert isinstance(source, PythonFile) and source.cells[0].text == data.decode(encoding)
    assert source.render({}) == data
    result = migrate_file("job.py", data, RULES)
    assert result.error is None and result.migrated == (head + "# é à ü € ?\n" + NEW).encode(encoding, "replace")
    assert result.encoding == source.encoding


def test_a_coding_line_counts_on_line_two_only_after_a_comment_or_blank_line() -> None:
    data = b"x = 1\n# -*- coding: latin-1 -*-\n# caf\xe9\n"
    assert coding_line(data) is None
    with pytest.raises(SourceError, match=r"not UTF-8 .*declare it on its first or second line"):
        read_source("job.py", data)


def test_a_databricks_notebook_source_may_declare_its_encoding_on_line_two() -> None:
    text = "# Databricks notebook source\n# -*- coding: latin-1 -*-\n# café\n# COMMAND ----------\n\n" + OLD
    source = read_source("nb.py", text.encode("latin-1"))
    assert isinstance(source, DatabricksFile) and source.encoding == "iso8859-1"
    result = migrate_file("nb.py", text.encode("latin-1"), RULES)
    assert result.migrated == text.replace(OLD, NEW).encode("latin-1")


@pytest.mark.parametrize(
    "data, message",
    [
        (b"# -*- coding: klingon -*-\nx = 1\n", "declares 'klingon', which is no encoding Python knows"),
        (b"\xef\xbb\xbf# -*- coding: latin-1 -*-\nx = 1\n", "byte order mark but its coding line declares 'latin-1'"),
        (
            b"# -*- coding: cp1252 -*-\n# \x81\n",
            r"not valid cp1252, the encoding its coding line declares \("
            r"character maps to <undefined> at byte 27\): declare the encoding "
            r"the file is really in, or save it in cp1252",
        ),
        (b"# -*- coding: utf-16 -*-\nx = 1\n", r"declares 'utf-16', which Python refuses in a coding line"),
    ],
)
def test_a_coding_line_python_would_refuse_is_an_error(data: bytes, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        read_source("job.py", data)


class _Accented(Rule):
    """Renames ``x`` to ``é`` (which an ASCII file cannot hold)."""

    CODE = "AM997"
    DESCRIPTION = "test only"

    def leave_Name(self, original_node: libcst.Name, updated_node: libcst.Name) -> libcst.Name:
        return updated_node.with_changes(value="é") if original_node.value == "x" else updated_node


def test_a_migration_its_encoding_cannot_hold_is_not_written_and_says_why() -> None:
    data = b"# -*- coding: ascii -*-\nimport serverless_gpu\nx = 1\n"
    result = migrate_file("job.py", data, [*RULES, _Accented])
    assert result.migrated is None
    assert result.error == (
        "the migrated text cannot be written in ascii, the encoding its coding line declares: it "
        "would hold 'é'; declare utf-8 instead and run air-migrate again"
    )


def test_write_mode_and_a_diff_git_applies_keep_the_files_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    data = (LATIN + OLD).encode("latin-1")
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    (tmp_path / "job.py").write_bytes(data)
    assert main(["--diff", "job.py"]) == 1
    diff = capsysbinary.readouterr().out
    assert b"caf\xe9" in diff and "café".encode() not in diff  # the patch holds the file's own bytes
    applied = subprocess.run(["git", "apply", "-"], input=diff, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "job.py").read_bytes() == (LATIN + NEW).encode("latin-1")
    (tmp_path / "job.py").write_bytes(data)
    assert main(["job.py"]) == 0
    assert (tmp_path / "job.py").read_bytes() == (LATIN + NEW).encode("latin-1")
    assert main(["--check", "job.py"]) == 0  # a second run has nothing left to do


def test_standard_input_comes_back_in_its_own_encoding(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, (LATIN + OLD).encode("latin-1"))
    assert main(["--stdin-filename", "job.py", "-"]) == 0
    assert capsysbinary.readouterr().out == (LATIN + NEW).encode("latin-1")


def test_a_bom_with_a_utf8_coding_line_is_kept_and_so_is_the_line() -> None:
    data = ("\ufeff# -*- coding: utf-8 -*-\n# café\n" + OLD).encode("utf-8")
    result = migrate_file("job.py", data, RULES)
    assert result.error is None and result.encoding == "utf-8"
    assert result.migrated == ("\ufeff# -*- coding: utf-8 -*-\n# café\n" + NEW).encode("utf-8")
