"""An item for a person stays reported after a write (issue 31, 1): the write leaves a ``# TODO(air-migrate AMxxx)``
marker above each statement it changes that holds one, and every later run reports a marker whose item it does not
find again, until a person resolves the item and deletes the marker, or suppresses the item.

Before, ``gpu_type=GPU_TYPE`` (``GPU_TYPE`` from the environment, default ``"H100"``) was reported once (AM109),
renamed to ``accelerator_type=GPU_TYPE`` by the write, and the next ``--check`` passed with nothing reported."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest
from golden_harness import run_cli

from air_migrate.todo_markers import LEFT_NOTE, left_markers

ENVIRONMENT = (
    'import os\n\nfrom serverless_gpu import distributed\n\nGPU_TYPE = os.environ.get("GPU_TYPE", "H100")\n'
    "\n\n@distributed(gpus=1, gpu_type=GPU_TYPE)\ndef train():\n    return 1\n"
)
ITEM = (
    "AM109 manual GPU_TYPE is not bound to a string literal (it is imported, computed or set in a loop), so "
    "air-migrate cannot tell whether it is an old GPU model name (which the runtime warns about): make sure its "
    "value is an accelerator type such as 'GPU_8xH100'"
)
MARKER = "# TODO(air-migrate AM109): " + ITEM.split(" manual ", 1)[1]


def _run(argv: List[str], capsys: pytest.CaptureFixture[str]) -> Tuple[int, List[str]]:
    code, out = run_cli(argv, capsys)
    return code, [line.split(": ", 1)[1] for line in out.splitlines() if not line.endswith(": would change")]


@pytest.fixture
def written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "train.py"
    path.write_text(ENVIRONMENT)
    assert _run(["--check", str(path)], capsys)[0] == 1
    code, report = _run([str(path)], capsys)
    assert code == 0 and ITEM in report
    return path


def test_the_write_leaves_a_marker_above_the_changed_statement(written: Path) -> None:
    assert written.read_text() == ENVIRONMENT.replace("serverless_gpu", "databricks.air").replace(
        "@distributed(gpus=1, gpu_type=GPU_TYPE)",
        MARKER + "\n@distributed(num_accelerators=1, accelerator_type=GPU_TYPE)",
    )


def test_check_keeps_failing_on_the_item_and_a_second_write_changes_nothing(
    written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    after = written.read_text()
    assert _run(["--check", str(written)], capsys) == (1, [ITEM + LEFT_NOTE])
    assert _run([str(written)], capsys) == (0, [ITEM + LEFT_NOTE])
    assert written.read_text() == after  # no second marker


def test_a_suppression_on_the_statement_silences_it(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written.write_text(
        written.read_text().replace(
            "accelerator_type=GPU_TYPE)", "accelerator_type=GPU_TYPE)  # air-migrate: ignore[AM109]"
        )
    )
    assert _run(["--check", str(written)], capsys) == (0, [])


def test_resolving_it_means_deleting_the_marker(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fixed = written.read_text().replace('"H100")', '"GPU_1xH100")').replace(MARKER + "\n", "")
    written.write_text(fixed)
    assert _run(["--check", str(written)], capsys)[0] == 0


def test_a_marker_whose_item_is_found_again_is_not_reported_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"  # a name also used for something else: found again on every run
    path.write_text(
        'from serverless_gpu import distributed\nGPU = "H100"\nprint(GPU)\n\n'
        "@distributed(gpus=8, gpu_type=GPU)\ndef f(): ...\n"
    )
    run_cli([str(path)], capsys)
    assert "# TODO(air-migrate AM109)" in path.read_text()
    code, report = _run(["--check", str(path)], capsys)
    assert code == 1 and len(report) == 1 and not report[0].endswith(LEFT_NOTE)


def test_an_item_in_a_statement_the_write_does_not_change_gets_no_marker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    source = 'import importlib\nfrom serverless_gpu import distributed\nm = importlib.import_module("serverless_gpu")\n'
    path.write_text(source)
    run_cli([str(path)], capsys)
    assert path.read_text() == source.replace("from serverless_gpu", "from databricks.air")  # seen again as it is
    assert _run(["--check", str(path)], capsys)[0] == 1


def test_only_real_comments_are_markers() -> None:
    text = (
        'x = "# TODO(air-migrate AM109): not a comment"\n\n# TODO(air-migrate AM104): left\n@d(gpus=n)\ndef f(\n'
        "):\n    pass\n"
    )
    (marker,) = left_markers(text)
    assert (marker.line, marker.code, marker.message, marker.statement, marker.column) == (
        3,
        "AM104",
        "left",
        (4, 7),
        1,
    )
