"""``--diff``: patches ``git apply`` accepts (CRLF, no final newline, BOM, Databricks sources, notebook JSON),
per-cell diffs for notebooks, and colour only when asked for or on a terminal."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict

import pytest
from cli_fixtures import DATABRICKS, NOTEBOOK, SCRIPT, write_tree

from air_migrate.cli import main

LONG = "x" * 300
FILES: Dict[str, bytes] = {
    "plain.py": SCRIPT.encode(),
    "crlf.py": SCRIPT.replace("\n", "\r\n").encode(),
    "no_final_newline.py": SCRIPT.rstrip("\n").encode(),
    "bom.py": ("\ufeff" + SCRIPT).encode(),
    "form_feed.py": ("# section\x0c one\n" + SCRIPT + f"# {LONG}\n").encode(),
    "db_notebook.py": DATABRICKS.encode(),
    "db_crlf_no_newline.py": DATABRICKS.replace("\n", "\r\n").rstrip("\r\n").encode(),
}


def _git(root: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, input=stdin, text=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    assert _git(root, "init", "-q").returncode == 0
    assert _git(root, "config", "core.autocrlf", "false").returncode == 0
    monkeypatch.chdir(root)
    return root


def _migrated_in_place(tmp_path: Path, files: Dict[str, bytes]) -> Dict[str, bytes]:
    copy = write_tree(tmp_path / "in_place", files)
    main([str(copy)])
    return {name: (copy / name).read_bytes() for name in files}


def test_git_apply_takes_the_diff_and_gives_what_write_mode_gives(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(repo / "src", FILES)
    assert main(["--diff", "src"]) == 1
    diff, err = capsys.readouterr()
    assert "AM101" in err and "AM101" not in diff  # the report goes to stderr: stdout is only the patch
    assert f"# {LONG}" in diff  # never wrapped
    checked = _git(repo, "apply", "--check", "-", stdin=diff)
    assert checked.returncode == 0, checked.stderr
    assert _git(repo, "apply", "-", stdin=diff).returncode == 0
    expected = _migrated_in_place(tmp_path, FILES)
    for name in FILES:
        assert (repo / "src" / name).read_bytes() == expected[name], name
        assert expected[name] != FILES[name]


def test_headers_are_relative_to_the_current_directory(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(repo / "src", {"plain.py": SCRIPT})
    assert main(["--diff", str(repo / "src")]) == 1  # an absolute path on the command line
    assert capsys.readouterr().out.startswith("--- a/src/plain.py\n+++ b/src/plain.py\n@@ -1,4 +1,4 @@\n")


def test_a_notebook_diff_is_per_cell_by_default(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "nb.ipynb").write_text(NOTEBOOK)
    assert main(["--diff", "nb.ipynb"]) == 1
    assert capsys.readouterr().out == (
        "--- nb.ipynb:cell 2\n+++ nb.ipynb:cell 2\n@@ -1,2 +1,2 @@\n %pip install torch\n"
        "-from serverless_gpu import distributed\n\\ No newline at end of file\n"
        "+from databricks.air import distributed\n\\ No newline at end of file\n"
        "--- nb.ipynb:cell 4\n+++ nb.ipynb:cell 4\n@@ -1,3 +1,3 @@\n"
        '-@distributed(gpus=2, gpu_type="A10")\n'
        '+@distributed(num_accelerators=2, accelerator_type="GPU_1xA10")\n'
        " def f():\n     return 1\n\\ No newline at end of file\n"
    )


def test_diff_json_is_a_patch_of_the_notebook_file(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repo / "nb.ipynb").write_text(NOTEBOOK)
    assert main(["--diff=json", "nb.ipynb"]) == 1
    diff = capsys.readouterr().out
    assert diff.startswith("--- a/nb.ipynb\n+++ b/nb.ipynb\n")
    assert _git(repo, "apply", "-", stdin=diff).returncode == 0
    assert (repo / "nb.ipynb").read_bytes() == _migrated_in_place(tmp_path, {"nb.ipynb": NOTEBOOK.encode()})["nb.ipynb"]


def test_diff_then_a_path_is_not_read_as_a_diff_format(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "json").mkdir()  # a directory that happens to be named like a format
    (repo / "json" / "plain.py").write_text(SCRIPT)
    assert main(["--diff", "json"]) == 1
    assert capsys.readouterr().out.startswith("--- a/json/plain.py\n")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_colour_only_when_asked_and_the_text_is_the_same(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "plain.py").write_text(SCRIPT)
    main(["--diff", "plain.py"])
    plain_out, plain_err = capsys.readouterr()
    assert "\x1b" not in plain_out + plain_err  # auto: not a terminal
    main(["--diff", "--color", "always", "plain.py"])
    out, err = capsys.readouterr()
    assert "\x1b[31m-from serverless_gpu import distributed  # keep me\x1b[0m\n" in out
    assert "\x1b[32m+from databricks.air import distributed  # keep me\x1b[0m\n" in out
    assert "\x1b[36m@@ -1,4 +1,4 @@\x1b[0m\n" in out
    assert "\x1b[32mchange\x1b[0m" in err  # report lines (on stderr with --diff) too
    assert _ANSI.sub("", out) == plain_out and _ANSI.sub("", err) == plain_err
    main(["--diff", "--color", "never", "plain.py"])
    assert "\x1b" not in "".join(capsys.readouterr())


def test_auto_colour_on_a_terminal_and_no_color(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    (repo / "plain.py").write_text(SCRIPT)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    main(["--check", "plain.py"])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    main(["--check", "plain.py"])
    assert "\x1b" not in capsys.readouterr().out


# A file long enough (200 lines or more) for difflib's matcher to take its blank lines for junk.
_FILLER = "".join(f"def helper_{n}(x):\n    return x * {n}\n\n\n" for n in range(60))
LONG_SCRIPT = (
    _FILLER + "def launch():\n    from serverless_gpu import distributed as nested\n\n"
    "    @nested(gpus=2)\n    def job():\n        pass\n\n    return job\n"
)


def test_a_long_files_diff_holds_only_the_changed_lines_and_their_context(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(repo, {"long.py": LONG_SCRIPT})
    assert main(["--diff", "long.py"]) == 1
    diff = capsys.readouterr().out
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == ["-    from serverless_gpu import distributed as nested", "-    @nested(gpus=2)"]
    assert added == ["+    from databricks.air import distributed as nested", "+    @nested(num_accelerators=2)"]
    assert diff.count("\n@@ ") + diff.startswith("@@ ") == 1
    assert len(diff.splitlines()) == 3 + 3 + 2 + 1 + 2 + 3  # headers, context, a change, one line, a change, context
    assert _git(repo, "apply", "-", stdin=diff).returncode == 0
    assert (repo / "long.py").read_text() == LONG_SCRIPT.replace("serverless_gpu", "databricks.air").replace(
        "gpus=2", "num_accelerators=2"
    )


def test_the_diff_of_a_cell_is_minimal_too() -> None:
    from air_migrate.diffing import cell_diffs
    from air_migrate.results import FileResult

    before = LONG_SCRIPT
    after = before.replace("serverless_gpu", "databricks.air").replace("(gpus=2)", "(num_accelerators=2)")
    diff = cell_diffs(FileResult("nb.ipynb", b"", cells={2: (before, after)}), "nb.ipynb")
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        "-    from serverless_gpu import distributed as nested",
        "+    from databricks.air import distributed as nested",
        "-    @nested(gpus=2)",
        "+    @nested(num_accelerators=2)",
    ]
