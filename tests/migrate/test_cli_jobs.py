"""``-j N``: files run in a pool of processes, with output byte-identical to a run in one process."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest
from cli_fixtures import BLOCKED, CLEAN, DATABRICKS, MANUAL, NOT_UTF8, NOTEBOOK, SCRIPT, SCRIPT_AFTER, write_tree

from air_migrate.cli import main

TREE = {
    "a/train.py": SCRIPT,
    "a/nb.ipynb": NOTEBOOK,
    "b/db_notebook.py": DATABRICKS,
    "b/dynamic.py": MANUAL,
    "b/blocked.py": BLOCKED,
    "c/bad.py": NOT_UTF8,
    "c/clean.py": CLEAN,
    "c/more.py": SCRIPT.replace("train", "fit"),
    "d/aliased.py": "import serverless_gpu as sg\n\n@sg.distributed(gpus=1, gpu_type='A10')\ndef g(): ...\n",
}


def _run(argv: List[str], capsys: pytest.CaptureFixture[str]) -> Tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("mode", [["--diff"], ["--check"], ["--diff=json"]])
def test_output_is_the_same_whatever_the_number_of_processes(
    mode: List[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, TREE)
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "report.json"
    runs = []
    for jobs in ("1", "2", "4", "0"):
        code, out, err = _run(mode + ["-j", jobs, "--report", str(report), "--report-format", "json", "."], capsys)
        runs.append((code, out, err, report.read_text()))
    assert runs[0][0] == 3  # bad.py fails; every other file was still processed
    assert "--- a/a/train.py" in runs[0][1] or "a/train.py: would change" in runs[0][1]
    assert all(run == runs[0] for run in runs[1:])


def test_writing_in_parallel_gives_the_same_files_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = []
    for jobs in ("1", "3"):
        root = write_tree(tmp_path / f"run{jobs}", TREE)
        monkeypatch.chdir(root)
        code, out, err = _run(["-j", jobs, "."], capsys)
        files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        results.append((code, out, err, files))
    assert results[0] == results[1]
    assert results[0][3]["a/train.py"] == SCRIPT_AFTER.encode()


def test_a_finding_in_one_file_never_shows_under_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, TREE)
    monkeypatch.chdir(tmp_path)
    alone = {}
    for path in sorted(TREE):
        main(["--check", path])
        alone[path] = [line for line in capsys.readouterr().out.splitlines() if not line.endswith("would change")]
    for jobs in ("1", "4"):
        main(["--check", "-j", jobs, "."])
        together = [line for line in capsys.readouterr().out.splitlines() if not line.endswith("would change")]
        assert together == [line for path in sorted(TREE) for line in alone[path]]
    assert alone["c/clean.py"] == [] and alone["b/blocked.py"] != []


def test_more_processes_than_files_and_a_single_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "one.py").write_text(SCRIPT)
    assert main(["-j", "8", str(tmp_path / "one.py")]) == 0
    assert (tmp_path / "one.py").read_text() == SCRIPT_AFTER
    assert "1 file(s) scanned" in capsys.readouterr().err


def test_jobs_start_a_pool_of_that_many_processes_and_0_means_one_per_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import concurrent.futures
    import os

    started: List[int] = []

    class CountingPool(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, max_workers: int) -> None:
            started.append(max_workers)
            super().__init__(max_workers=max_workers)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", CountingPool)
    write_tree(tmp_path, {f"f{index}.py": SCRIPT for index in range(6)})
    for jobs in ("1", "2", "0", "50"):
        main(["--check", "-j", jobs, str(tmp_path)])
    assert started == [2, min(os.cpu_count() or 1, 6), 6]  # -j1 runs in this process; never more than files
    capsys.readouterr()
