"""The golden-fixture machinery shared by the per-part golden tests (``test_am1_golden.py``, ``test_am2_golden.py``).

A case is a folder holding ``input.py``, a Databricks notebook source. The same cells make a Jupyter notebook and,
without their ``# MAGIC`` cells, a plain script (a case with a ``%%`` cell magic has no script form). A file
``arguments`` holds extra command-line arguments (``--partial``). ``expected/`` holds, for each form, the exact file
after ``air-migrate`` in write mode (``*.out``) and ``report.txt``: per form, the exit codes of write, ``--diff`` and
``--check`` mode and of ``--check`` once the file is written (0: nothing left; 1: an item still needs a person, so
it is still reported), then the exact report lines.

``AIR_MIGRATE_UPDATE_GOLDEN=1`` rewrites ``expected/`` from the current output instead of comparing with it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.cli import main
from air_migrate.todo_markers import LEFT_NOTE

FORMS = ("script.py", "databricks.py", "notebook.ipynb")
UPDATE = os.environ.get("AIR_MIGRATE_UPDATE_GOLDEN") == "1"
_HEADER = "# Databricks notebook source\n"
_SEPARATOR = "\n# COMMAND ----------\n\n"
_MAGIC = "# MAGIC"


def case_names(golden: Path) -> List[str]:
    """The case folders under ``golden`` (those with an ``input.py``), sorted."""
    return sorted(path.name for path in golden.iterdir() if (path / "input.py").is_file())


def cells(source: str) -> List[str]:
    """The cells of a Databricks notebook source, as written between its separators."""
    assert source.startswith(_HEADER)
    return source[len(_HEADER) :].split(_SEPARATOR)


def _is_magic(cell: str) -> bool:
    return all(line.startswith(_MAGIC) for line in cell.splitlines() if line.strip())


def _unmagic(cell: str) -> str:
    return "\n".join(
        line[len(_MAGIC) + 1 :] if line.startswith(_MAGIC + " ") else line[len(_MAGIC) :]
        for line in cell.strip("\n").splitlines()
    )


def as_script(source: str) -> Optional[str]:
    """The Python cells as one script (``None`` when a cell magic holds code that a script cannot)."""
    python = [cell for cell in cells(source) if not _is_magic(cell)]
    if any(_unmagic(cell).startswith("%%") for cell in cells(source) if _is_magic(cell)):
        return None
    return "\n\n\n".join(cell.strip("\n") for cell in python) + "\n"


def as_notebook(source: str) -> str:
    """The cells as a Jupyter notebook in nbformat's own style (markdown for ``%md``, magics unprefixed)."""
    notebook_cells = []
    for number, cell in enumerate(cells(source), start=1):
        if _is_magic(cell):
            text = _unmagic(cell)
            if text.startswith("%md"):
                made = new_markdown_cell(text.split("\n", 1)[1] if "\n" in text else "")
            else:
                made = new_code_cell(text)
        else:
            made = new_code_cell(cell.strip("\n"))
        made.id = f"cell-{number}"  # fixed, so that the expected output is too
        notebook_cells.append(made)
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    return nbformat.writes(new_notebook(cells=notebook_cells, metadata={"kernelspec": kernel})) + "\n"


def forms(golden: Path, case: str) -> Dict[str, str]:
    """Each form the case has, by file name, with its text."""
    source = (golden / case / "input.py").read_text()
    made = {"script.py": as_script(source), "databricks.py": source, "notebook.ipynb": as_notebook(source)}
    return {name: text for name, text in made.items() if text is not None}


def parameters(golden: Path) -> List[Tuple[str, str]]:
    """Every (case, form) pair under ``golden``, for ``pytest.mark.parametrize``."""
    return [(case, form) for case in case_names(golden) for form in forms(golden, case)]


def arguments(golden: Path, case: str) -> List[str]:
    """The case's extra command-line arguments (from its ``arguments`` file; none without one)."""
    path = golden / case / "arguments"
    return path.read_text().split() if path.exists() else []


def run_cli(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> Tuple[int, str]:
    """``air-migrate argv`` in this process: its exit code and standard output."""
    code = main(list(argv))
    return code, capsys.readouterr().out


def report_lines(out: str, name: str) -> List[str]:
    """The report records of a run over the file ``name`` (without the ``would change`` summary line)."""
    return [line for line in out.splitlines() if line != f"{name}: would change"]


def _record(line: str) -> str:
    """A report line without its position (``AMxxx severity message``), which a rewrite above it may move, nor the
    note that says a marker left by the write is what reports it now."""
    return line[line.index(" AM") :].replace(LEFT_NOTE, "")


def expected_report(golden: Path, case: str) -> Dict[str, Tuple[str, List[str]]]:
    """Per form: its exit-code line and its report lines, from ``expected/report.txt``."""
    sections: Dict[str, Tuple[str, List[str]]] = {}
    current = None
    for line in (golden / case / "expected" / "report.txt").read_text().splitlines():
        if line.startswith("== "):
            current, codes = line[3:].split(": ", 1)
            sections[current] = (codes, [])
        elif current is not None:
            sections[current][1].append(line)
    return sections


def _update(golden: Path, case: str, form: str, output: bytes, codes: str, report: List[str]) -> None:
    expected = golden / case / "expected"
    expected.mkdir(exist_ok=True)
    (expected / f"{form}.out").write_bytes(output)
    path = expected / "report.txt"
    sections = expected_report(golden, case) if path.exists() else {}
    sections[form] = (codes, report)
    text = "".join(
        f"== {name}: {sections[name][0]}\n" + "".join(line + "\n" for line in sections[name][1])
        for name in FORMS
        if name in sections
    )
    path.write_text(text)


def git_work_tree(path: Path) -> Path:
    """Make ``path`` a git work tree that keeps line endings as they are, for ``git apply --check``."""
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "config", "core.autocrlf", "false"], cwd=path, check=True)
    return path


def assert_diff_applies(diff: str, cwd: Optional[Path] = None) -> None:
    """``git apply --check`` accepts ``diff`` against the files as they are now."""
    applied = subprocess.run(
        ["git", "apply", "--check", "-"], input=diff.encode("utf-8", "surrogateescape"), capture_output=True, cwd=cwd
    )
    assert applied.returncode == 0, applied.stderr.decode()


def check_golden(golden: Path, case: str, form: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run one case in one form through the command line and compare everything with ``expected/``.

    Checks: the report and the exit codes of write, ``--diff`` and ``--check`` mode, the written bytes, that neither
    ``--diff`` nor ``--check`` writes, ``git apply --check`` of the ``--diff`` output (for ``.py`` forms), a second
    run that changes and rewrites nothing, and the exit code of ``--check`` after the write, which fails exactly
    while an item for a person is left (an item is never dropped by the write that leaves it).
    """
    source = forms(golden, case)[form].encode()
    path = workdir / form
    path.write_bytes(source)
    extra = arguments(golden, case)

    check_code, check_out = run_cli([*extra, "--check", form], capsys)
    diff_code, diff = run_cli([*extra, "--diff", form], capsys)
    assert path.read_bytes() == source  # neither mode writes
    if form.endswith(".py") and diff:
        assert_diff_applies(diff)
    write_code, _ = run_cli([*extra, form], capsys)
    output = path.read_bytes()
    after_code, after_out = run_cli([*extra, "--check", form], capsys)
    assert path.read_bytes() == output
    codes = f"write {write_code}, diff {diff_code}, check {check_code}, check after write {after_code}"
    report = report_lines(check_out, form)
    left = [line for line in report if " manual " in line or " blocking " in line]
    if output != source or not left:  # (a blocked file keeps its changes pending: --check fails on them anyway)
        assert (after_code == 1) == bool(left), after_out  # an item for a person stays reported until resolved

    if output != source:  # (a file left as it is would only be read again the same way)
        again_code, again_out = run_cli([*extra, form], capsys)
        assert (again_code, path.read_bytes()) == (0, output)  # a second run changes nothing
        blocked = any(" blocking " in line for line in report)
        if not blocked or "--partial" in extra:  # (a blocked file keeps its changes pending; --todo-comments)
            assert not [line for line in again_out.splitlines() if " change " in line or " review " in line]
        if not blocked:  # once the file is migrated, at most what needed a person (or a note) is left to report
            manual = {_record(line) for line in report if " manual " in line or " info " in line}
            assert {_record(line) for line in again_out.splitlines()} <= manual, again_out

    if UPDATE:
        _update(golden, case, form, output, codes, report)
        return
    expected_codes, expected_lines = expected_report(golden, case)[form]
    assert (codes, report) == (expected_codes, expected_lines)
    assert output == (golden / case / "expected" / f"{form}.out").read_bytes()
