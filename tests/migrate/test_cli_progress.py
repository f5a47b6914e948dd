"""The progress bar: on standard error only when it is a terminal and there are many files; never in the output."""

from __future__ import annotations

import os
import re
import pty
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
from cli_fixtures import SCRIPT

from air_migrate.cli import main

BAR = "air-migrate ["
ERASE = "\r\x1b[K"


def _tree(root: Path, files: int) -> Path:
    root.mkdir(exist_ok=True)
    for index in range(files):
        (root / f"job_{index:02d}.py").write_text(SCRIPT)
    return root


def _run_with_terminal_stderr(args: List[str]) -> Tuple[int, str, str]:
    """Run air-migrate with standard error on a pseudo-terminal; return (exit code, stdout, terminal text)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "air_migrate", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TERM": "xterm"},
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other side is closed: the child has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    stdout = process.stdout.read().decode()  # type: ignore[union-attr]
    process.stdout.close()  # type: ignore[union-attr]
    return process.wait(), stdout, b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_bar_on_a_terminal_for_many_files_never_in_stdout(tmp_path: Path) -> None:
    code, out, terminal = _run_with_terminal_stderr(["--check", "--color", "never", str(_tree(tmp_path / "t", 24))])
    assert code == 1
    assert BAR in terminal and "] 24/24 files" in terminal
    assert BAR not in out and "\r" not in out and "\x1b" not in out
    assert out.count("would change") == 24
    # Erased before the summary, which starts on a clean line.
    summary = terminal.rindex("air-migrate: 24 file(s) scanned")
    assert terminal[:summary].endswith(ERASE)


def test_report_lines_on_the_terminal_never_share_a_line_with_the_bar(tmp_path: Path) -> None:
    code, out, terminal = _run_with_terminal_stderr(["--diff", "--color", "never", str(_tree(tmp_path / "t", 22))])
    assert code == 1 and out.startswith("--- a/") and BAR not in out
    report_lines = [line for line in terminal.split("\n") if "AM10" in line]
    assert len(report_lines) == 22 * 4
    for line in report_lines:
        visible = line.split(ERASE)[-1]  # what stays on screen after the erase
        assert visible.startswith(str(tmp_path)) and BAR not in visible


@pytest.mark.parametrize("args, files", [(["--no-progress"], 24), ([], 19)])
def test_no_bar_when_turned_off_or_few_files(args: List[str], files: int, tmp_path: Path) -> None:
    code, out, terminal = _run_with_terminal_stderr(["--check", *args, str(_tree(tmp_path / "t", files))])
    assert code == 1 and BAR not in terminal and ERASE not in terminal


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", str(_tree(tmp_path / "t", 24))]) == 1
    out, err = capsys.readouterr()
    assert BAR not in err and "\r" not in err + out


def test_the_bar_says_how_long_is_left_and_nothing_follows_the_summary(tmp_path: Path) -> None:
    code, _, terminal = _run_with_terminal_stderr(["--check", "--color", "never", str(_tree(tmp_path / "t", 21))])
    assert code == 1
    assert re.search(r"air-migrate \[=+\] 21/21 files, \d\d:\d\d<\d\d:\d\d", terminal)
    assert terminal.endswith(" 0 failed\n")  # no bar drawn or erased again once the summary is printed
    assert terminal.count(ERASE) == terminal.count(BAR)  # every bar drawn is erased
