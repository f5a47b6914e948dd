"""Golden tests of the TorchDistributor migration (AM2xx): each shape and each reported case, in three forms.

Each folder under ``golden/torch_distributor/`` is a case. Its ``input.py`` is a Databricks notebook source; the
same cells make a Jupyter notebook and, without their ``# MAGIC`` cells, a plain script (a case with a ``%%writefile``
cell has no script form). A file ``arguments`` holds extra command-line arguments (``--partial``). ``expected/``
holds, for each form, the exact file after ``air-migrate`` in write mode (``*.out``) and ``report.txt``: per form, the
exit codes of write, ``--diff`` and ``--check`` mode, then the exact report lines.

Each case and form is checked through the command line: the report and exit codes, the written bytes, ``git apply
--check`` of the ``--diff`` output (for ``.py`` forms), and a second run that changes and rewrites nothing.

``AIR_MIGRATE_UPDATE_GOLDEN=1 python -m pytest tests/migrate/test_am2_golden.py`` rewrites ``expected/`` from the
current output: read the ``git diff`` of it before committing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.cli import main

GOLDEN = Path(__file__).parent / "golden" / "torch_distributor"
CASES = sorted(path.name for path in GOLDEN.iterdir() if (path / "input.py").is_file())
FORMS = ("script.py", "databricks.py", "notebook.ipynb")
UPDATE = os.environ.get("AIR_MIGRATE_UPDATE_GOLDEN") == "1"
_HEADER = "# Databricks notebook source\n"
_SEPARATOR = "\n# COMMAND ----------\n\n"
_MAGIC = "# MAGIC"


def cells(source: str) -> List[str]:
    """The cells of a Databricks notebook source, as written between its separators."""
    assert source.startswith(_HEADER)
    return source[len(_HEADER):].split(_SEPARATOR)


def _is_magic(cell: str) -> bool:
    return all(line.startswith(_MAGIC) for line in cell.splitlines() if line.strip())


def _unmagic(cell: str) -> str:
    return "\n".join(line[len(_MAGIC) + 1:] if line.startswith(_MAGIC + " ") else line[len(_MAGIC):]
                     for line in cell.strip("\n").splitlines())


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


def forms(case: str) -> Dict[str, str]:
    source = (GOLDEN / case / "input.py").read_text()
    made = {"script.py": as_script(source), "databricks.py": source, "notebook.ipynb": as_notebook(source)}
    return {name: text for name, text in made.items() if text is not None}


PARAMETERS = [(case, form) for case in CASES for form in forms(case)]


def _arguments(case: str) -> List[str]:
    path = GOLDEN / case / "arguments"
    return path.read_text().split() if path.exists() else []


def _run(argv: List[str], capsys: pytest.CaptureFixture[str]) -> Tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


def _report(out: str, name: str) -> List[str]:
    return [line for line in out.splitlines() if line != f"{name}: would change"]


def _expected_report(case: str) -> Dict[str, Tuple[str, List[str]]]:
    """Per form: its exit-code line and its report lines, from ``expected/report.txt``."""
    sections: Dict[str, Tuple[str, List[str]]] = {}
    current = None
    for line in (GOLDEN / case / "expected" / "report.txt").read_text().splitlines():
        if line.startswith("== "):
            current, codes = line[3:].split(": ", 1)
            sections[current] = (codes, [])
        elif current is not None:
            sections[current][1].append(line)
    return sections


def _update(case: str, form: str, output: bytes, codes: str, report: List[str]) -> None:
    expected = GOLDEN / case / "expected"
    expected.mkdir(exist_ok=True)
    (expected / f"{form}.out").write_bytes(output)
    path = expected / "report.txt"
    sections = _expected_report(case) if path.exists() else {}
    sections[form] = (codes, report)
    text = "".join(f"== {name}: {sections[name][0]}\n" + "".join(line + "\n" for line in sections[name][1])
                   for name in FORMS if name in sections)
    path.write_text(text)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree as the current directory (``git apply --check`` reads the files there)."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "config", "core.autocrlf", "false"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("case, form", PARAMETERS)
def test_golden(case: str, form: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = forms(case)[form].encode()
    path = workdir / form
    path.write_bytes(source)
    arguments = _arguments(case)

    check_code, check_out = _run([*arguments, "--check", form], capsys)
    diff_code, diff = _run([*arguments, "--diff", form], capsys)
    assert path.read_bytes() == source  # neither mode writes
    if form.endswith(".py") and diff:
        applied = subprocess.run(["git", "apply", "--check", "-"], input=diff, text=True, capture_output=True)
        assert applied.returncode == 0, applied.stderr
    write_code, _ = _run([*arguments, form], capsys)
    output = path.read_bytes()
    codes = f"write {write_code}, diff {diff_code}, check {check_code}"
    report = _report(check_out, form)

    if output != source:  # (a file left as it is would only be read again the same way)
        again_code, again_out = _run([*arguments, form], capsys)
        assert (again_code, path.read_bytes()) == (0, output)  # a second run changes nothing
        assert not [line for line in again_out.splitlines() if " change " in line or " review " in line]
        if not any(" blocking " in line for line in report):
            assert again_out == ""  # and, once the file is migrated, has nothing left to report

    if UPDATE:
        _update(case, form, output, codes, report)
        return
    expected_codes, expected_report = _expected_report(case)[form]
    assert (codes, report) == (expected_codes, expected_report)
    assert output == (GOLDEN / case / "expected" / f"{form}.out").read_bytes()


def test_every_case_is_checked_in_every_form_it_has() -> None:
    assert len(CASES) >= 25
    for case in CASES:
        sections = _expected_report(case)
        assert list(sections) == list(forms(case)), case
    assert [case for case in CASES if "script.py" not in forms(case)] == ["writefile"]
