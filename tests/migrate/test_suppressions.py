"""Mentions that are not code only inform, and suppression comments as ruff users write them.

* a mention of ``serverless_gpu`` in a docstring, a log line or a message is an ``info`` note, which never fails
  ``--check``; a string that is a module path into it (``mock.patch("serverless_gpu.launcher.distributed")``) is
  still an item for a person;
* ``# air-migrate: ignore[AM101]`` (several codes, or none for all) and ``# noqa: AM101`` hide the items of a line,
  ``# air-migrate: skip-file`` a whole file; one that hides nothing is reported (``AM904``, ``info``);
* in scripts, Databricks notebook sources (per cell, lines of the file) and ``.ipynb`` (lines of the cell).
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

from air_migrate.cli import main
from cli_fixtures import notebook
from rule_helpers import migrate_text

GUARDED = "try:\n    from serverless_gpu import distributed{comment}\nexcept ImportError:\n    distributed = None\n"
GUARDED_ITEM = "job.py:2:5: AM101 manual a guarded import from serverless_gpu is left as it is: move it by hand"


def _check(tmp_path: Path, name: str, source: str, capsys: pytest.CaptureFixture) -> "tuple[int, List[str]]":
    path = tmp_path / name
    path.write_text(source)
    code = main(["--check", "--color", "never", str(path)])
    out = capsys.readouterr().out
    return code, [line.replace(str(tmp_path) + "/", "") for line in out.splitlines()]


# --- mentions that are not code ---------------------------------------------------------------------------------


def test_a_mention_in_a_docstring_a_log_line_or_a_message_is_a_note_and_check_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source = (
        '"""Trains the model (moved off serverless_gpu)."""\n'
        "import logging\n\n"
        "# serverless_gpu was the old launcher\n"
        'logging.info("serverless_gpu is deprecated")\n'
        'print(f"serverless_gpu {1}")\n'
    )
    code, lines = _check(tmp_path, "job.py", source, capsys)
    assert code == 0
    assert lines == [
        "job.py:1:1: AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is",
        "job.py:5:14: AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is",
        "job.py:6:7: AM101 info a string mentions serverless_gpu (prose, not code); it is left as it is",
    ]


def test_a_string_that_is_a_module_path_still_needs_a_person(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = 'from unittest import mock\n\npatcher = mock.patch("serverless_gpu.launcher.distributed")\n'
    code, lines = _check(tmp_path, "job.py", source, capsys)
    assert code == 1
    assert lines == [
        'job.py:3:22: AM101 manual a string names the module path "serverless_gpu.launcher.distributed", left as '
        "it is: if code imports or patches by it (mock.patch, import_module), write databricks.air there"
    ]


def test_notes_are_counted_apart_in_the_summary_and_the_json_report(tmp_path: Path, capsys) -> None:
    (tmp_path / "job.py").write_text('"""Uses serverless_gpu."""\n')
    report = tmp_path / "report.json"
    assert main(["--check", "--report", str(report), "--report-format", "json", str(tmp_path / "job.py")]) == 0
    assert "0 item(s) need a person, 0 failed, 1 note(s)" in capsys.readouterr().err
    import json

    document = json.loads(report.read_text())
    assert document["summary"]["notes"] == 1 and document["summary"]["needs_person"] == 0
    assert [record["severity"] for record in document["records"]] == ["info"]


# --- line suppressions ------------------------------------------------------------------------------------------


def test_without_a_suppression_a_guarded_import_fails_check(tmp_path: Path, capsys) -> None:
    code, lines = _check(tmp_path, "job.py", GUARDED.format(comment=""), capsys)
    assert (code, lines) == (1, [GUARDED_ITEM])


@pytest.mark.parametrize(
    "comment",
    [
        "  # air-migrate: ignore[AM101]",
        "  # air-migrate: ignore[AM101,AM901]",
        "  # air-migrate: ignore",
        "  # noqa: AM101",
        "  # noqa: F401, AM101",
        "  # NOQA:AM101",
    ],
)
def test_a_suppression_on_the_line_hides_the_item_and_check_passes(tmp_path: Path, capsys, comment: str) -> None:
    code, lines = _check(tmp_path, "job.py", GUARDED.format(comment=comment), capsys)
    expected = (
        []
        if "AM901" not in comment
        else [
            "job.py:2:45: AM904 info `# air-migrate: ignore[AM101,AM901]`: nothing of AM901 to suppress on this line (a "
            "change is always made and reported; to leave a file as it is: `# air-migrate: skip-file`): remove it"
        ]
    )  # each code of a list is checked, as ruff's RUF100 does; a note never fails --check
    assert (code, lines) == (0, expected)


def test_a_suppression_of_another_code_hides_nothing_and_is_reported(tmp_path: Path, capsys) -> None:
    code, lines = _check(tmp_path, "job.py", GUARDED.format(comment="  # air-migrate: ignore[AM102]"), capsys)
    assert code == 1
    assert lines == [
        GUARDED_ITEM,
        "job.py:2:45: AM904 info `# air-migrate: ignore[AM102]`: nothing of AM102 to suppress on this line (a change "
        "is always made and reported; to leave a file as it is: `# air-migrate: skip-file`): remove it",
    ]


def test_a_bare_noqa_belongs_to_other_linters(tmp_path: Path, capsys) -> None:
    code, lines = _check(tmp_path, "job.py", GUARDED.format(comment="  # noqa"), capsys)
    assert (code, lines) == (1, [GUARDED_ITEM])  # not a suppression of ours, and not reported as unused


def test_a_suppression_that_suppresses_nothing_is_reported_with_its_line() -> None:
    source = (
        "from serverless_gpu import distributed\n"
        "x = 1  # air-migrate: ignore\n"
        "y = 2  # noqa: AM101, E501\n"
        "z = 3  # air-migrate: ignore[AM999]\n"
    )
    _, report = migrate_text(source)
    assert report == [
        "job.py:1:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "job.py:2:8: AM904 info `# air-migrate: ignore` suppresses nothing on this line (a change is always made "
        "and reported; to leave a file as it is: `# air-migrate: skip-file`): remove it",
        "job.py:3:8: AM904 info `# noqa: AM101, E501`: nothing of AM101 to suppress on this line (a change is always "
        "made and reported; to leave a file as it is: `# air-migrate: skip-file`): remove it",
        "job.py:4:8: AM904 info `# air-migrate: ignore[AM999]` names unknown code(s) AM999 (see air-migrate "
        "--list-rules)",
    ]


def test_a_change_is_made_and_reported_whatever_the_comment_says() -> None:
    source = "import serverless_gpu  # air-migrate: ignore[AM101]\n"
    migrated, report = migrate_text(source)
    assert migrated == "import databricks.air  # air-migrate: ignore[AM101]\n"
    assert report[0] == "job.py:1:1: AM101 change import serverless_gpu -> import databricks.air"
    assert report[1].startswith("job.py:1:24: AM904 info `# air-migrate: ignore[AM101]`: nothing of AM101")


def test_a_comment_inside_a_string_is_not_a_suppression() -> None:
    source = GUARDED.format(comment="") + 'text = "# air-migrate: ignore"\n'
    _, report = migrate_text(source)
    assert report == [GUARDED_ITEM]


def test_a_suppression_of_a_rule_not_selected_is_neither_used_nor_reported() -> None:
    from air_migrate.engine import migrate_file
    from air_migrate.rules import REGISTRY

    source = "import serverless_gpu\nx = 1  # noqa: AM103\n"
    result = migrate_file("job.py", source.encode(), [REGISTRY["AM101"]])
    assert [record.code for record in result.records] == ["AM101"]


def test_a_suppressed_blocking_item_no_longer_holds_the_file_back() -> None:
    blocked = 'from serverless_gpu import distributed\n\n@distributed(gpus=4, gpu_type="H100"){comment}\ndef f(): ...\n'
    held, report = migrate_text(blocked.format(comment=""))
    assert held == blocked.format(comment="") and any(" AM105 blocking " in line for line in report)
    migrated, report = migrate_text(blocked.format(comment="  # air-migrate: ignore[AM105]"))
    assert migrated.startswith("from databricks.air import distributed")
    assert not any(" blocking " in line or "AM904" in line for line in report)


def test_a_suppressed_item_gets_no_todo_marker() -> None:
    migrated, report = migrate_text(GUARDED.format(comment="  # noqa: AM101"), todo_comments=True)
    assert "TODO" not in migrated and report == []
    migrated, _ = migrate_text(GUARDED.format(comment=""), todo_comments=True)
    assert "# TODO(air-migrate AM101)" in migrated  # the marker the suppression saves


def test_a_multi_line_item_is_suppressed_on_its_last_line() -> None:
    source = 'import importlib\nm = importlib.import_module(\n    "serverless_gpu"\n)  # noqa: AM101\n'
    _, report = migrate_text(source)
    assert report == []
    _, report = migrate_text(source.replace("  # noqa: AM101", ""))
    assert [line.split(" ", 2)[1] for line in report] == ["AM101"]


# --- notebooks and whole files ----------------------------------------------------------------------------------


def test_in_a_databricks_notebook_a_suppression_works_per_cell_line_and_a_magic_line() -> None:
    source = (
        "# Databricks notebook source\n"
        "# MAGIC %pip install serverless_gpu  # air-migrate: ignore[AM110]\n\n"
        "# COMMAND ----------\n\n"
        "import serverless_gpu.telemetry  # noqa: AM101\n"
        "import serverless_gpu.telemetry as t\n"
    )
    _, report = migrate_text(source, path="nb.py")
    assert report == [
        "nb.py:cell 2:7:1: AM101 manual serverless_gpu.telemetry has no counterpart in databricks.air (its modules "
        "are compute, data, exceptions, launcher, ray, runtime, utils), so it is left as it is: import the names it "
        "gives from databricks.air or one of those modules"
    ]


def test_in_a_jupyter_notebook_a_suppression_works_on_the_line_of_its_cell() -> None:
    source = notebook(
        "%pip install serverless_gpu  # air-migrate: ignore[AM110]\nx = 1",
        "y = 2\nimport serverless_gpu.telemetry  # noqa: AM101\nz = 3  # noqa: AM101",
    )
    _, report = migrate_text(source, path="nb.ipynb")
    assert report == [
        "nb.ipynb:cell 3:3:8: AM904 info `# noqa: AM101`: nothing of AM101 to suppress on this line (a change is "
        "always made and reported; to leave a file as it is: `# air-migrate: skip-file`): remove it"
    ]


def test_a_skipped_cell_is_suppressed_from_any_of_its_lines() -> None:
    source = notebook("%%sh\necho serverless_gpu  # air-migrate: ignore[AM901]", "x = 1")
    _, report = migrate_text(source, path="nb.ipynb")
    assert report == []
    _, report = migrate_text(source.replace("  # air-migrate: ignore[AM901]", ""), path="nb.ipynb")
    assert report == ["nb.ipynb:cell 2:1:1: AM901 manual cell skipped: the cell magic %%sh does not hold Python"]


@pytest.mark.parametrize(
    "path, source",
    [
        ("job.py", "import serverless_gpu\n\n# air-migrate: skip-file\n"),
        (
            "nb.py",
            "# Databricks notebook source\nimport serverless_gpu\n\n# COMMAND ----------\n\n# air-migrate: skip-file\n",
        ),
        ("nb.ipynb", notebook("import serverless_gpu", "  # air-migrate: skip-file")),
    ],
)
def test_skip_file_leaves_the_file_as_it_is_and_reports_nothing(path: str, source: str) -> None:
    migrated, report = migrate_text(source, path=path)
    assert (migrated, report) == (source, [])


def test_skip_file_must_be_a_comment_line_of_its_own() -> None:
    source = (
        'import serverless_gpu\nnote = "# air-migrate: skip-file"\nx = 1  # air-migrate: skip-file\n'
        '"""\n# air-migrate: skip-file\n"""\n'
    )
    migrated, _ = migrate_text(source)
    assert migrated.startswith("import databricks.air\n")
