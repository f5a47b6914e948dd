"""Golden tests of the TorchDistributor migration (AM2xx): each shape and each reported case, in three forms.

Each folder under ``golden/torch_distributor/`` is a case; ``golden_harness.py`` says what a case holds and what is
checked of it (exact output, exact report, exit code of every mode, ``git apply --check`` of ``--diff``, a no-op
second run).

``AIR_MIGRATE_UPDATE_GOLDEN=1 python -m pytest tests/migrate/test_am2_golden.py`` rewrites ``expected/`` from the
current output: read the ``git diff`` of it before committing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from golden_harness import case_names, check_golden, expected_report, forms, git_work_tree, parameters

GOLDEN = Path(__file__).parent / "golden" / "torch_distributor"
CASES = case_names(GOLDEN)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree as the current directory (``git apply --check`` reads the files there)."""
    monkeypatch.chdir(git_work_tree(tmp_path))
    return tmp_path


@pytest.mark.parametrize("case, form", parameters(GOLDEN))
def test_golden(case: str, form: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_golden(GOLDEN, case, form, workdir, capsys)


def test_every_case_is_checked_in_every_form_it_has() -> None:
    assert len(CASES) >= 25
    for case in CASES:
        sections = expected_report(GOLDEN, case)
        assert list(sections) == list(forms(GOLDEN, case)), case
    assert [case for case in CASES if "script.py" not in forms(GOLDEN, case)] == ["writefile"]
