"""Golden tests of the serverless_gpu -> databricks.air migration (AM1xx), and byte preservation of plain files.

Each folder under ``golden/serverless_gpu/`` is a case, run in script, Databricks source and Jupyter forms;
``golden_harness.py`` says what a case holds and what is checked of it (exact output, exact report, exit code of
every mode, ``git apply --check`` of ``--diff``, a no-op second run).

``AIR_MIGRATE_UPDATE_GOLDEN=1 python -m pytest tests/migrate/test_am1_golden.py`` rewrites ``expected/`` from the
current output: read the ``git diff`` of it before committing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Dict

import pytest

from golden_harness import (
    assert_diff_applies,
    case_names,
    check_golden,
    expected_report,
    forms,
    git_work_tree,
    parameters,
    run_cli,
)

GOLDEN = Path(__file__).parent / "golden" / "serverless_gpu"
CASES = case_names(GOLDEN)
# Cases whose current output is wrong by the rules of the migration: they must fail until the tool is fixed.
KNOWN_WRONG: Dict[str, str] = {}
"""Cases whose expected files say what the tool should do but does not yet: case -> why (a strict xfail)."""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree as the current directory (``git apply --check`` reads the files there)."""
    monkeypatch.chdir(git_work_tree(tmp_path))
    return tmp_path


def _marked(case: str, form: str) -> object:
    reason = KNOWN_WRONG.get(case)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(case, form, marks=marks, id=f"{case}-{form}")


@pytest.mark.parametrize("case, form", [_marked(case, form) for case, form in parameters(GOLDEN)])
def test_golden(case: str, form: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_golden(GOLDEN, case, form, workdir, capsys)


def test_every_case_is_checked_in_every_form_it_has() -> None:
    assert len(CASES) >= 30
    for case in CASES:
        sections = expected_report(GOLDEN, case)
        assert list(sections) == list(forms(GOLDEN, case)), case


def test_decorator_through_an_alias_of_distributed_is_migrated_or_reported(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = (
        'from serverless_gpu import distributed\n\nrun_on = distributed\n\n@run_on(gpus=8, gpu_type="H100")\n'
        "def train(): ...\n"
    )
    Path("alias.py").write_text(source)
    _, out = run_cli(["--check", "alias.py"], capsys)
    about_the_decorator = [line for line in out.splitlines() if line.startswith("alias.py:5:")]
    assert about_the_decorator  # rewritten (AM102) or reported: either way the decorator's line is named


# Byte preservation of plain scripts, in shapes the notebook-derived forms cannot express.
_SCRIPT = (
    'from serverless_gpu import distributed\n\n@distributed(gpus=8, gpu_type="H100")\ndef train():\n\tprint("x")\n'
)
_MIGRATED = (
    'from databricks.air import distributed\n\n@distributed(num_accelerators=8, accelerator_type="GPU_8xH100")\n'
    'def train():\n\tprint("x")\n'
)
BYTE_CASES = {
    "crlf": (_SCRIPT.replace("\n", "\r\n").encode(), _MIGRATED.replace("\n", "\r\n").encode()),
    "utf8_bom": (b"\xef\xbb\xbf" + _SCRIPT.encode(), b"\xef\xbb\xbf" + _MIGRATED.encode()),
    "no_final_newline": (_SCRIPT.rstrip("\n").encode(), _MIGRATED.rstrip("\n").encode()),
    "tabs_and_non_ascii": (
        ("# caf\u00e9 \u2014 train\n" + _SCRIPT).encode(),
        ("# caf\u00e9 \u2014 train\n" + _MIGRATED).encode(),
    ),
}


def _migrate_and_check(
    path: Path, expected: bytes, capsys: pytest.CaptureFixture[str], *targets: str, git_applies: bool = True
) -> None:
    """--diff applies with git, write mode writes exactly ``expected`` to ``path``, a second run is a no-op."""
    before = path.read_bytes()
    diff_code, diff = run_cli(["--diff", *targets], capsys)
    assert (diff_code, path.read_bytes()) == (1, before)
    if git_applies:
        assert_diff_applies(diff)
    assert run_cli(list(targets), capsys)[0] == 0
    assert path.read_bytes() == expected
    assert run_cli(list(targets), capsys) == (0, "")
    assert path.read_bytes() == expected


@pytest.mark.parametrize("name", sorted(BYTE_CASES))
def test_plain_script_bytes_are_kept(name: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, expected = BYTE_CASES[name]
    path = workdir / f"{name}.py"
    path.write_bytes(source)
    _migrate_and_check(path, expected, capsys, path.name)


def test_checkpoint_directory_is_left_alone(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = workdir / "notebooks"
    checkpoints = folder / ".ipynb_checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "train-checkpoint.py").write_text(_SCRIPT)
    (folder / "train.py").write_text(_SCRIPT)
    _migrate_and_check(folder / "train.py", _MIGRATED.encode(), capsys, "notebooks")
    assert (checkpoints / "train-checkpoint.py").read_text() == _SCRIPT


def test_symlinked_file_keeps_its_link_and_its_target_is_edited(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "real").mkdir()
    target = workdir / "real" / "train.py"
    target.write_text(_SCRIPT)
    link = workdir / "train.py"
    link.symlink_to(Path("real") / "train.py")
    # (git applies a patch to a symlink's own text, the target path, so the diff of its content is not checked)
    _migrate_and_check(target, _MIGRATED.encode(), capsys, "train.py", git_applies=False)
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "train.py")


def test_executable_file_keeps_its_mode(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = workdir / "train.py"
    path.write_text("#!/usr/bin/env python\n" + _SCRIPT)
    path.chmod(0o755)
    _migrate_and_check(path, ("#!/usr/bin/env python\n" + _MIGRATED).encode(), capsys, "train.py")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
