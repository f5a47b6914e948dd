"""Code that does not parse: a plain script is a file that failed (AM903, exit 3, left as it is); a notebook cell is
skipped (AM902), with the parser's own message unless the line is a bare magic or shell command."""

from __future__ import annotations

import json
from pathlib import Path

import libcst
import pytest
from cli_fixtures import SCRIPT, SCRIPT_AFTER, feed_stdin, notebook, write_tree

from air_migrate.cli import main
from air_migrate.syntax_errors import describe, looks_like_shell

# The script of issue 15: the decorator's parenthesis is never closed.
BROKEN = 'from serverless_gpu import distributed\n\n@distributed(gpus=2, gpu_type="H100"\ndef train():\n    return 1\n'
BROKEN_LINE = "broken.py:3:13: AM903 error cannot parse: '(' was never closed"


def _summary(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("mode", [[], ["--check"], ["--diff"]])
def test_a_script_that_does_not_parse_fails_and_is_left_as_it_is(
    mode: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, {"broken.py": BROKEN})
    monkeypatch.chdir(tmp_path)
    assert main([*mode, "broken.py"]) == 3
    out, err = capsys.readouterr()
    assert (tmp_path / "broken.py").read_text() == BROKEN
    report = err.splitlines()[:-1] if mode == ["--diff"] else out.splitlines()  # (--diff: stdout holds the diff)
    assert report == [BROKEN_LINE]  # no guess at a magic, no "would change"
    assert mode != ["--diff"] or out == ""  # no diff
    assert "error:" not in err  # said once, by its report line
    assert _summary(err).endswith(", 0 item(s) need a person, 1 failed")


def test_in_a_directory_every_other_file_is_still_migrated_and_the_reports_count_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, {"project/broken.py": BROKEN, "project/good.py": SCRIPT})
    monkeypatch.chdir(tmp_path)
    assert main(["--report", "report.json", "--report-format", "json", "project"]) == 3
    out, err = capsys.readouterr()
    assert (tmp_path / "project/good.py").read_text() == SCRIPT_AFTER
    assert (tmp_path / "project/broken.py").read_text() == BROKEN
    assert out.splitlines()[0] == BROKEN_LINE.replace("broken.py", "project/broken.py")
    assert "project/good.py:1:1: AM101 change" in out
    assert "1 changed (4 change(s)), 0 item(s) need a person, 1 failed" in _summary(err)

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["failed"] == 1 and report["summary"]["changed"] == 1
    assert report["errors"] == [{"file": "project/broken.py", "message": "cannot parse: '(' was never closed"}]
    (failed,) = [record for record in report["records"] if record["file"] == "project/broken.py"]
    assert (failed["code"], failed["severity"], failed["line"], failed["col"]) == ("AM903", "error", 3, 13)

    assert main(["--check", "--report", "report.txt", "project"]) == 3
    capsys.readouterr()
    text = (tmp_path / "report.txt").read_text().splitlines()
    assert text[0] == BROKEN_LINE.replace("broken.py", "project/broken.py")
    assert not [line for line in text if ": error: " in line]  # the record says it; no second line
    assert text[-1].endswith(" 1 failed")


def test_standard_input_that_does_not_parse_comes_back_unchanged_with_exit_3(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    feed_stdin(monkeypatch, BROKEN.encode())
    assert main(["-"]) == 3
    out, err = capsysbinary.readouterr()
    assert out == BROKEN.encode()
    assert err.decode().splitlines()[0] == BROKEN_LINE.replace("broken.py", "-")


def test_other_findings_in_a_script_that_does_not_parse_are_not_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    path.write_text("%pip install serverless_gpu\nimport serverless_gpu\n")  # a magic is no Python in a script
    assert main(["--check", "--fix-pip", str(path)]) == 3
    assert capsys.readouterr().out.splitlines() == [f"{path}:1:1: AM903 error cannot parse: invalid syntax"]


DATABRICKS = (
    "# Databricks notebook source\n"
    "from serverless_gpu import distributed\n"
    "\n# COMMAND ----------\n\n"
    "import serverless_gpu\n"
    "x = load(1,\n"
    "\n# COMMAND ----------\n\n"
    "import serverless_gpu\n"
    "  pip install serverless_gpu\n"
)


def test_a_databricks_cell_in_python_gets_the_parser_message_and_a_bare_command_is_called_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nb.py"
    path.write_text(DATABRICKS)
    assert main(["--check", str(path)]) == 1
    lines = [line.replace(str(path), "nb.py") for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        "nb.py:cell 1:2:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "nb.py:cell 2:7:9: AM902 manual cell skipped: cannot parse: '(' was never closed; nothing in it is migrated: "
        "fix the cell and run air-migrate again",
        "nb.py:cell 3:12:3: AM902 manual cell skipped: it is not valid Python (a bare shell or magic line such as "
        "`%cd` or `pip install`?), so nothing in it is migrated: check it by hand",
        "nb.py: would change",
    ]
    assert main([str(path)]) == 0
    assert path.read_text() == DATABRICKS.replace("from serverless_gpu", "from databricks.air", 1)


def test_a_jupyter_cell_in_python_gets_the_parser_message_and_magics_are_no_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nb.ipynb"
    path.write_text(
        notebook(
            "%cd /tmp\nfrom serverless_gpu import distributed",
            "import serverless_gpu\nprint 'hello'",
            "import serverless_gpu\ncd /tmp && ls",
        )
    )
    assert main(["--check", str(path)]) == 1
    lines = [line.replace(str(path), "nb.ipynb") for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        "nb.ipynb:cell 2:2:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "nb.ipynb:cell 3:2:1: AM902 manual cell skipped: cannot parse: Missing parentheses in call to 'print'. Did "
        "you mean print(...)?; nothing in it is migrated: fix the cell and run air-migrate again",
        "nb.ipynb:cell 4:2:1: AM902 manual cell skipped: it is not valid Python (a bare shell or magic line such as "
        "`%cd` or `pip install`?), so nothing in it is migrated: check it by hand",
        "nb.ipynb: would change",
    ]


@pytest.mark.parametrize(
    "line, shell",
    [
        ("%cd /dbfs", True),
        ("  !nvidia-smi", True),
        ("pip install serverless_gpu", True),
        ("cd /tmp && ls", True),
        ("ls -la", True),
        ("pwd", True),
        ("cat = load(", False),
        ("cd(path", False),
        ("pip.main([", False),
        ("x = foo(1,", False),
        ("", False),
    ],
)
def test_what_counts_as_a_bare_magic_or_shell_line(line: str, shell: bool) -> None:
    assert looks_like_shell(line) is shell


def test_the_message_is_pythons_and_libcsts_only_when_python_accepts_the_text() -> None:
    text = "import os\nx = [1,\n"
    with pytest.raises(libcst.ParserSyntaxError) as caught:
        libcst.parse_module("import a\n" + text)
    problem = describe(text, caught.value, lines_before=1)
    assert (problem.line, problem.column, problem.message) == (2, 5, "'[' was never closed")
    # A text Python accepts, that libcst did not (a construct it does not know yet): libcst's words, one line.
    fallback = describe("x = 1\n", caught.value, lines_before=1)
    assert (
        fallback.message.startswith("libcst cannot parse it (parser error: error at ") and "\n" not in fallback.message
    )
    assert fallback.line >= 1
