"""Report lines, their severities and order, ``--report FILE`` as text and JSON, and the closing summary."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Set

import pytest
from cli_fixtures import BLOCKED, CLEAN, DATABRICKS, MANUAL, NOT_UTF8, NOT_UTF8_ADVICE, NOTEBOOK, SCRIPT, write_tree

from air_migrate.cli import main
from air_migrate.report import record_line
from air_migrate.results import Record
from air_migrate.rule_base import Severity

LINE = re.compile(
    r"^(?P<path>[^:]+)(?::cell (?P<cell>\d+))?:(?P<line>\d+):(?P<col>\d+): (?P<code>AM\d{3}) "
    r"(?P<severity>change|review|manual|blocking) (?P<message>.+)$"
)


def test_severity_words_come_from_the_records_severity() -> None:
    base = dict(path="nb.ipynb", cell=3, line=2, column=5, code="AM101", message="m")
    assert record_line(Record(**base)) == "nb.ipynb:cell 3:2:5: AM101 change m"
    assert record_line(Record(**base, severity=Severity.REVIEW)) == "nb.ipynb:cell 3:2:5: AM101 review m"
    assert record_line(Record(**base, severity=Severity.MANUAL)) == "nb.ipynb:cell 3:2:5: AM101 manual m"
    assert record_line(Record(**base, severity=Severity.BLOCKING)) == "nb.ipynb:cell 3:2:5: AM101 blocking m"
    assert str(Record(**{**base, "cell": None})) == "nb.ipynb:2:5: AM101 change m"


def test_report_lines_are_exact_and_sorted_by_path_then_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "b_blocked.py": BLOCKED,
            "a_script.py": SCRIPT,
            "c_dynamic.py": MANUAL,
            "d_db.py": DATABRICKS,
            "e_nb.ipynb": NOTEBOOK,
            "f_clean.py": CLEAN,
        },
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--check", "."]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if not line.endswith(": would change")]
    assert lines == [
        "a_script.py:1:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "a_script.py:3:14: AM102 change gpus= -> num_accelerators=",
        "a_script.py:3:22: AM102 change gpu_type= -> accelerator_type=",
        "a_script.py:3:31: AM103 change 'H100' -> 'GPU_8xH100'",
        "b_blocked.py:1:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "b_blocked.py:3:14: AM102 change gpus= -> num_accelerators=",
        "b_blocked.py:3:22: AM102 change gpu_type= -> accelerator_type=",
        "b_blocked.py:3:31: AM105 blocking 'H100' with 4 GPUs has no accelerator type: write one by hand",
        'c_dynamic.py:2:10: AM101 manual a dynamic import of "serverless_gpu" is left as it is: '
        "import databricks.air instead",
        # Databricks source: the cell, and the line in the file.
        "d_db.py:cell 2:6:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "d_db.py:cell 3:10:14: AM102 change gpus= -> num_accelerators=",
        "d_db.py:cell 3:10:22: AM102 change gpu_type= -> accelerator_type=",
        "d_db.py:cell 3:10:31: AM103 change 'H100' -> 'GPU_1xH100'",
        # Jupyter: the cell (counting the markdown one), and the line within the cell.
        "e_nb.ipynb:cell 2:2:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "e_nb.ipynb:cell 4:1:14: AM102 change gpus= -> num_accelerators=",
        "e_nb.ipynb:cell 4:1:22: AM102 change gpu_type= -> accelerator_type=",
        "e_nb.ipynb:cell 4:1:31: AM103 change 'A10' -> 'GPU_1xA10'",
    ]
    assert all(LINE.match(line) for line in lines)


def _check_record(record: Dict[str, Any]) -> None:
    """The JSON schema of one record, written out."""
    assert set(record) == {
        "file",
        "cell",
        "line",
        "col",
        "end_line",
        "end_col",
        "code",
        "severity",
        "message",
        "before",
        "after",
    }
    assert isinstance(record["file"], str) and record["file"]
    assert record["cell"] is None or (isinstance(record["cell"], int) and record["cell"] >= 1)
    for key in ("line", "col"):
        assert isinstance(record[key], int) and record[key] >= 1
    for key in ("end_line", "end_col"):
        assert record[key] is None or (isinstance(record[key], int) and record[key] >= 1)
    if record["end_line"] is not None:
        assert record["end_line"] >= record["line"]
    assert re.fullmatch(r"AM\d{3}", record["code"])
    assert record["severity"] in ("info", "change", "review", "manual", "blocking")
    assert isinstance(record["message"], str) and record["message"]
    for key in ("before", "after"):
        assert record[key] is None or isinstance(record[key], str)


def _check_document(document: Any) -> None:
    assert isinstance(document, dict) and set(document) == {"version", "summary", "records", "errors"}
    assert document["version"] == 1
    summary = document["summary"]
    assert set(summary) == {
        "mode",
        "scanned",
        "relevant",
        "changed",
        "changes",
        "needs_person",
        "blocked",
        "failed",
        "notes",
    }
    assert summary["mode"] in ("write", "diff", "check", "out-dir", "stdin")
    assert all(isinstance(summary[key], int) and summary[key] >= 0 for key in summary if key != "mode")
    assert isinstance(document["records"], list) and isinstance(document["errors"], list)
    for record in document["records"]:
        _check_record(record)
    for error in document["errors"]:
        assert set(error) == {"file", "message"} and all(isinstance(v, str) and v for v in error.values())
    keys = [(r["file"], r["cell"] or 0, r["line"], r["col"]) for r in document["records"]]
    assert keys == sorted(keys)


def test_the_json_report_has_its_schema_and_the_same_records_as_the_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "a.py": SCRIPT,
            "b.py": BLOCKED,
            "c.py": MANUAL,
            "d.py": DATABRICKS,
            "e.ipynb": NOTEBOOK,
            "f.py": CLEAN,
            "g.py": NOT_UTF8,
        },
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--check", "--report", "r.json", "--report-format", "json", "."]) == 3
    out, err = capsys.readouterr()
    document = json.loads((tmp_path / "r.json").read_text())
    _check_document(document)
    text_records = [line for line in out.splitlines() if not line.endswith(": would change")]
    as_text = []
    for r in document["records"]:
        where = r["file"] + (f":cell {r['cell']}" if r["cell"] is not None else "")
        as_text.append(f"{where}:{r['line']}:{r['col']}: {r['code']} {r['severity']} {r['message']}")
    assert as_text == text_records
    assert document["summary"] == {
        "mode": "check",
        "scanned": 7,
        "relevant": 6,
        "changed": 3,
        "changes": 12,
        "needs_person": 2,
        "blocked": 1,
        "failed": 1,
        "notes": 0,
    }
    assert document["errors"] == [
        {"file": "g.py", "message": f"not UTF-8 (invalid continuation byte at byte 20); {NOT_UTF8_ADVICE}"}
    ]
    assert err.endswith(
        "air-migrate: 7 file(s) scanned, 6 mention serverless_gpu, its keywords or TorchDistributor, 3 would change "
        "(12 change(s)), 2 item(s) need a person, 1 failed; 1 file(s) not converted because of "
        "blocking items (see --partial)\n"
    )


def test_the_text_report_file_holds_the_records_errors_and_summary_without_colour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, {"a.py": SCRIPT, "g.py": NOT_UTF8})
    monkeypatch.chdir(tmp_path)
    assert main(["--color", "always", "--report", "r.txt", "."]) == 3
    out, err = capsys.readouterr()
    text = (tmp_path / "r.txt").read_text()
    assert "\x1b[" in out and "\x1b[" not in text
    assert text.splitlines() == [
        "a.py:1:1: AM101 change from serverless_gpu import -> from databricks.air import",
        "a.py:3:14: AM102 change gpus= -> num_accelerators=",
        "a.py:3:22: AM102 change gpu_type= -> accelerator_type=",
        "a.py:3:31: AM103 change 'H100' -> 'GPU_8xH100'",
        f"g.py: error: not UTF-8 (invalid continuation byte at byte 20); {NOT_UTF8_ADVICE}",
        "air-migrate: 2 file(s) scanned, 2 mention serverless_gpu, its keywords or TorchDistributor, 1 changed (4 change(s)), "
        "0 item(s) need a person, 1 failed",
    ]
    assert not list(tmp_path.glob("*.air-migrate-tmp"))


def _minus_lines(diff: str) -> List[Set[int]]:
    """Per hunk, the old-file line numbers of its removed lines."""
    hunks: List[Set[int]] = []
    old = 0
    for line in diff.splitlines():
        header = re.match(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", line)
        if header:
            hunks.append(set())
            old = int(header.group(1))
        elif hunks and line.startswith("-") and not line.startswith("---"):
            hunks[-1].add(old)
            old += 1
        elif hunks and line.startswith(" "):
            old += 1
    return hunks


@pytest.mark.parametrize("name, content", [("job.py", SCRIPT), ("db.py", DATABRICKS), ("nb.ipynb", NOTEBOOK)])
def test_every_diff_hunk_has_a_change_record(
    name: str, content: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / name).write_text(content)
    monkeypatch.chdir(tmp_path)
    assert main(["--diff", "--report", "r.json", "--report-format", "json", name]) == 1
    diff = capsys.readouterr().out
    records = [r for r in json.loads((tmp_path / "r.json").read_text())["records"] if r["severity"] == "change"]
    # Notebooks: one diff per cell, its lines numbered within the cell, like the records.
    sections = re.split(r"^--- .*:cell (\d+)\n", diff, flags=re.M)
    per_cell = (
        {int(sections[i]): sections[i + 1] for i in range(1, len(sections), 2)}
        if name.endswith("ipynb")
        else {None: diff}
    )
    hunks = 0
    for cell, text in per_cell.items():
        in_cell = [r for r in records if cell is None or r["cell"] == cell]
        for removed in _minus_lines(text):
            hunks += 1
            assert any(r["line"] <= n <= (r["end_line"] or r["line"]) for r in in_cell for n in removed), (
                cell,
                removed,
                records,
            )
    assert hunks >= 2 if name == "nb.ipynb" else hunks >= 1


def test_a_run_with_nothing_relevant_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "air-migrate: 1 file(s) scanned, 0 mention serverless_gpu, its keywords or TorchDistributor, 0 changed "
        "(0 change(s)), 0 item(s) need a person, 0 failed; nothing to migrate was found\n"
    )
    assert main([str(tmp_path / "empty")]) == 0
    assert "0 file(s) scanned" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    (tmp_path / "r.txt").mkdir()
    with pytest.raises(SystemExit) as usage:
        main(["--report", str(tmp_path / "r.txt"), str(tmp_path / "a.py")])
    assert usage.value.code == 2 and "is a directory: name a file" in capsys.readouterr().err
    # Nothing, not even root, can create a file in /proc: the write fails after the run.
    assert main(["--check", "--report", "/proc/air-migrate-report.txt", str(tmp_path / "a.py")]) == 3
    assert "air-migrate: error: cannot write the report /proc/air-migrate-report.txt" in capsys.readouterr().err
