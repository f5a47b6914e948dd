"""``--out-dir DIR``: every scanned file copied under DIR (migrated or as it was), the inputs never touched."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Dict

import pytest
from cli_fixtures import BLOCKED, CLEAN, NOTEBOOK, SCRIPT, SCRIPT_AFTER, write_tree

from air_migrate.cli import main


def _snapshot(root: Path) -> Dict[str, tuple]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path / "src",
        {
            "train.py": SCRIPT,
            "pkg/nb.ipynb": NOTEBOOK,
            "pkg/clean.py": CLEAN,
            "blocked.py": BLOCKED,
            ".ipynb_checkpoints/train-checkpoint.py": SCRIPT,
            "data.csv": "a,b\n",
        },
    )


def test_copies_keep_the_layout_and_the_inputs_stay_as_they_were(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (src / "train.py").chmod(0o751)
    before = _snapshot(src)
    out = tmp_path / "out"
    assert main(["--out-dir", str(out), str(src)]) == 0
    assert _snapshot(src) == before  # bytes, mtime and inode of every input
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == [
        "blocked.py",
        "pkg/clean.py",
        "pkg/nb.ipynb",
        "train.py",
    ]
    assert (out / "train.py").read_text() == SCRIPT_AFTER
    assert stat.S_IMODE((out / "train.py").stat().st_mode) == 0o751
    assert "from databricks.air import distributed" in (out / "pkg" / "nb.ipynb").read_text()
    assert (out / "pkg" / "clean.py").read_text() == CLEAN  # unchanged files are copied as they are
    assert (out / "blocked.py").read_text() == BLOCKED  # so are files a blocking item leaves unchanged
    assert not list(out.glob("*.air-migrate-*"))
    err = capsys.readouterr().err
    assert f"4 file(s) scanned, 3 mention serverless_gpu, its keywords or TorchDistributor, 2 changed in {out} " in err


def test_an_existing_directory_needs_force_and_keeps_its_other_files(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    (out / "train.py").write_text("old copy\n")
    with pytest.raises(SystemExit) as usage:
        main(["--out-dir", str(out), str(src)])
    assert usage.value.code == 2
    assert "already exists: name a new directory, or add --force" in capsys.readouterr().err
    assert (out / "train.py").read_text() == "old copy\n"
    assert main(["--out-dir", str(out), "--force", str(src)]) == 0
    assert (out / "train.py").read_text() == SCRIPT_AFTER and (out / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("where", ["file", "the input directory"])
def test_refused_directories(where: str, src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.txt" if where == "file" else src
    if where == "file":
        out.write_text("x")
    before = _snapshot(src)
    with pytest.raises(SystemExit) as usage:
        main(["--out-dir", str(out), "--force", str(src)])
    assert usage.value.code == 2
    assert (
        "exists and is not a directory" if where == "file" else "the copies would replace the inputs"
    ) in capsys.readouterr().err
    assert _snapshot(src) == before


def test_a_copy_that_would_land_on_an_input_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = write_tree(tmp_path / "p", {"src/train.py": SCRIPT, "src/src/train.py": SCRIPT})
    with pytest.raises(SystemExit) as usage:
        main(["--out-dir", str(project), "--force", str(project / "src")])
    assert usage.value.code == 2
    assert "would put a copy over the input" in capsys.readouterr().err
    assert (project / "src" / "train.py").read_text() == SCRIPT


def test_an_output_directory_inside_the_inputs_is_never_read_back(src: Path) -> None:
    out = src / "migrated"
    assert main(["--out-dir", str(out), str(src)]) == 0
    assert main(["--out-dir", str(out), "--force", str(src)]) == 0  # a second run does not copy the copies
    assert not (out / "migrated").exists()
    assert (out / "train.py").read_text() == SCRIPT_AFTER and (src / "train.py").read_text() == SCRIPT


def test_layout_below_the_common_directory_of_several_inputs(tmp_path: Path) -> None:
    write_tree(tmp_path, {"a/x.py": SCRIPT, "b/deep/y.py": SCRIPT, "c/z.py": SCRIPT})
    out = tmp_path / "out"
    assert main(["--out-dir", str(out), str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c" / "z.py")]) == 0
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.py")) == ["a/x.py", "b/deep/y.py", "c/z.py"]
    single = tmp_path / "single"
    assert main(["--out-dir", str(single), str(tmp_path / "b" / "deep" / "y.py")]) == 0
    assert [p.name for p in single.iterdir()] == ["y.py"]


def test_a_symlinked_input_is_copied_as_a_file(tmp_path: Path) -> None:
    write_tree(tmp_path, {"real/job.py": SCRIPT})
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "job.py").symlink_to(tmp_path / "real" / "job.py")
    out = tmp_path / "out"
    assert main(["--out-dir", str(out), str(tmp_path / "src")]) == 0
    copy = out / "job.py"
    assert not copy.is_symlink() and copy.read_text() == SCRIPT_AFTER
    assert (tmp_path / "real" / "job.py").read_text() == SCRIPT


def test_a_file_that_fails_is_copied_as_it_is_and_the_run_exits_3(tmp_path: Path) -> None:
    write_tree(tmp_path / "src", {"bad.py": b"# serverless_gpu caf\xe9\n", "good.py": SCRIPT})
    out = tmp_path / "out"
    assert main(["--out-dir", str(out), str(tmp_path / "src")]) == 3
    assert (out / "bad.py").read_bytes() == b"# serverless_gpu caf\xe9\n"
    assert (out / "good.py").read_text() == SCRIPT_AFTER
