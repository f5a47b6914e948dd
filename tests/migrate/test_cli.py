"""The air-migrate command: files found, write mode end to end, safe writes, rule selection, the codes it lists,
and the options it passes to the engine."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from cli_fixtures import BLOCKED, DATABRICKS, DATABRICKS_AFTER, NOTEBOOK, SCRIPT, SCRIPT_AFTER, notebook, write_tree

import air_migrate
from air_migrate import runner
from air_migrate.cli import main
from air_migrate.discovery import discover
from air_migrate.writing import WriteError, write_atomically
from air_migrate.todo_markers import LEFT_NOTE


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path,
        {
            "train.py": SCRIPT,
            "nb.py": DATABRICKS,
            "nb.ipynb": NOTEBOOK,
            "plain.py": "x = 1\n",
            ".ipynb_checkpoints/train-checkpoint.py": SCRIPT,
            ".venv/lib/site.py": SCRIPT,
            "notes.txt": SCRIPT,
        },
    )


def test_write_mode_migrates_every_format_and_leaves_the_rest_alone(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = (tree / "plain.py").stat()
    assert main([str(tree)]) == 0
    assert (tree / "train.py").read_text() == SCRIPT_AFTER
    assert (tree / "nb.py").read_text() == DATABRICKS_AFTER
    cells = json.loads((tree / "nb.ipynb").read_text())["cells"]
    assert "".join(cells[1]["source"]) == "%pip install torch\nfrom databricks.air import distributed"
    assert "".join(cells[3]["source"]).startswith('@distributed(num_accelerators=2, accelerator_type="GPU_1xA10")')
    for untouched in (".ipynb_checkpoints/train-checkpoint.py", ".venv/lib/site.py", "notes.txt"):
        assert (tree / untouched).read_text() == SCRIPT
    after = (tree / "plain.py").stat()  # unchanged files are not rewritten
    assert (after.st_mtime_ns, after.st_ino) == (plain.st_mtime_ns, plain.st_ino)
    out, err = capsys.readouterr()
    assert f"{tree}/train.py:3:31: AM103 change 'H100' -> 'GPU_8xH100'" in out.splitlines()
    assert (
        "4 file(s) scanned, 3 mention serverless_gpu, its keywords or TorchDistributor, 3 changed (12 change(s))" in err
    )
    # A second run changes nothing and reports no change.
    assert main([str(tree)]) == 0
    out, err = capsys.readouterr()
    assert " change " not in out and "0 changed (0 change(s))" in err


def test_discovery_skips_tool_directories_honours_excludes_and_takes_named_files(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "a.py": "",
            "b.ipynb": "",
            "c.txt": "",
            "build/x.py": "",
            "tests/t.py": "",
            "pkg/tests/u.py": "",
            "pkg/v.py": "",
            ".git/hooks/h.py": "",
            "venv/w.py": "",
            "__pycache__/y.py": "",
            "site-packages/z.py": "",
            ".ipynb_checkpoints/b-checkpoint.ipynb": "",
        },
    )
    root = str(tmp_path)
    assert discover([root]) == [
        f"{root}/{name}" for name in ("a.py", "b.ipynb", "build/x.py", "pkg/tests/u.py", "pkg/v.py", "tests/t.py")
    ]
    assert discover([root], ["build", "tests/*.py"]) == [f"{root}/{name}" for name in ("a.py", "b.ipynb", "pkg/v.py")]
    # A file named on the command line is taken whatever its suffix; paths are normalised and found once.
    assert discover([f"{root}/c.txt", f"{root}/./a.py", f"{root}/pkg/../a.py", root], ["*.ipynb", "*/pkg/*"]) == [
        f"{root}/a.py",
        f"{root}/build/x.py",
        f"{root}/c.txt",
        f"{root}/tests/t.py",
    ]


def test_a_missing_path_is_a_failure_not_a_silent_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "good.py").write_text(SCRIPT)
    assert main([str(tmp_path / "missing.py"), str(tmp_path / "good.py")]) == 3
    assert f"{tmp_path}/missing.py: error: cannot read: No such file or directory" in capsys.readouterr().err
    assert (tmp_path / "good.py").read_text() == SCRIPT_AFTER


def test_a_file_with_a_blocking_item_is_left_unchanged_unless_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    path.write_text(BLOCKED)
    assert main([str(path)]) == 0
    assert path.read_text() == BLOCKED
    assert main(["--check", str(path)]) == 1
    assert "AM105 blocking 'H100' with 4 GPUs has no accelerator type" in capsys.readouterr().out
    assert main(["--partial", str(path)]) == 0
    marker = "# TODO(air-migrate AM105): 'H100' with 4 GPUs has no accelerator type: write one by hand\n"
    assert path.read_text() == BLOCKED.replace("from serverless_gpu", "from databricks.air").replace(
        "gpus=4, gpu_type=", "num_accelerators=4, accelerator_type="
    ).replace("@distributed", marker + "@distributed")  # the changed decorator holds its item
    capsys.readouterr()
    # A new keyword with a string is not looked at again (accelerator_type="H100" is for a person now): the marker
    # keeps the item reported, as a manual one (the rest of the file is migrated already).
    assert main(["--check", str(path)]) == 1
    assert [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines()] == [
        f"AM105 manual 'H100' with 4 GPUs has no accelerator type: write one by hand{LEFT_NOTE}"
    ]


def test_writes_keep_mode_bits_and_symlinks(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_text(SCRIPT)
    target.chmod(0o751)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    assert main([str(link)]) == 0
    assert link.is_symlink() and target.read_text() == SCRIPT_AFTER
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".air-migrate-")] == []


def test_a_file_changed_on_disk_during_the_run_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "job.py"
    path.write_text("edited by someone else\n")
    with pytest.raises(WriteError, match="changed on disk while air-migrate ran"):
        write_atomically(str(path), SCRIPT_AFTER.encode(), expected=SCRIPT.encode())
    assert path.read_text() == "edited by someone else\n"
    write_atomically(str(path), b"new\n", expected=b"edited by someone else\n")
    assert path.read_text() == "new\n"


def test_a_write_that_fails_is_reported_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    (tmp_path / "b.py").write_text(SCRIPT)
    real = write_atomically

    def flaky(path: str, data: bytes, expected: bytes) -> None:
        if path.endswith("a.py"):
            raise WriteError("cannot write it: No space left on device")
        real(path, data, expected)

    monkeypatch.setattr("air_migrate.modes.write_atomically", flaky)
    assert main([str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert f"{tmp_path}/a.py: error: not written: cannot write it: No space left on device" in err
    assert "2 file(s) scanned, 2 mention serverless_gpu, its keywords or TorchDistributor, 1 changed" in err
    assert (tmp_path / "a.py").read_text() == SCRIPT and (tmp_path / "b.py").read_text() == SCRIPT_AFTER


def test_an_internal_error_in_one_file_does_not_stop_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    (tmp_path / "b.py").write_text(SCRIPT)
    real = runner.migrate_file

    def buggy(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("a.py"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "migrate_file", buggy)
    assert main([str(tmp_path)]) == 3
    assert (
        f"{tmp_path}/a.py: error: internal error: RecursionError: maximum recursion depth exceeded "
        "(please report it)" in capsys.readouterr().err
    )
    assert (tmp_path / "b.py").read_text() == SCRIPT_AFTER


def test_select_ignore_and_bad_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.py"
    path.write_text(SCRIPT)
    assert main(["--select", "am101", str(path)]) == 0
    assert path.read_text() == SCRIPT.replace("from serverless_gpu", "from databricks.air")
    path.write_text(SCRIPT)
    assert main(["--ignore", "AM101", str(path)]) == 0
    assert path.read_text().startswith(
        "from serverless_gpu import distributed  # keep me\n\n@distributed(num_accelerators=8"
    )
    with pytest.raises(SystemExit) as usage:
        main(["--select", "AM999", str(path)])
    assert usage.value.code == 2
    assert "unknown rule code(s): AM999; --select and --ignore take the rule codes AM101" in capsys.readouterr().err


def test_the_options_for_the_engine_reach_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    seen: Dict[str, Any] = {}
    real = runner.migrate_file

    def spy(path: str, data: bytes, rules: Any, partial: bool, **options: Any) -> Any:
        seen.update(options, partial=partial, codes=[rule.CODE for rule in rules])
        return real(path, data, rules, partial, **options)

    monkeypatch.setattr(runner, "migrate_file", spy)
    main(["--check", str(tmp_path)])
    assert seen == {
        "fix_pip": False,
        "pip_package": None,
        "todo_comments": False,
        "partial": False,
        "codes": sorted(seen["codes"]),
    }
    main(
        [
            "--check",
            "--fix-pip",
            "--pip-package",
            "databricks-air-oss==0.3",
            "--todo-comments",
            "--partial",
            "--ignore",
            "AM102",
            str(tmp_path),
        ]
    )
    assert seen["fix_pip"] is True and seen["pip_package"] == "databricks-air-oss==0.3"
    assert seen["todo_comments"] is True and seen["partial"] is True and "AM102" not in seen["codes"]


def test_it_runs_as_a_module_and_lists_every_code_it_can_report() -> None:
    done = subprocess.run([sys.executable, "-m", "air_migrate", "--list-rules"], capture_output=True, text=True)
    assert done.returncode == 0
    listed = [line.split("  ", 1) for line in done.stdout.splitlines()]
    codes = [code for code, _ in listed]
    assert codes == sorted(set(codes)) and all(description.strip() for _, description in listed)
    package = Path(air_migrate.__file__).parent
    reported = {code for source in package.rglob("*.py") for code in re.findall(r"\bAM\d{3}\b", source.read_text())}
    assert reported <= set(codes), f"codes reported but not documented: {sorted(reported - set(codes))}"


def test_help_states_the_numbering_the_severities_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in (
        "path[:cell N]:line:col: AMxxx <severity> <message>",
        "All numbers are 1-based",
        "the line within the cell for Jupyter notebooks",
        "line in the file for plain scripts and for Databricks notebook sources",
        "change (rewritten)",
        "review (rewritten",
        "manual (not rewritten",
        "blocking (not rewritten",
        "--diff=json",
        "DIR must not exist, unless --force",
        "0 nothing to change",
        "2 usage error",
        "3 at least one file could not be processed",
    ):
        assert phrase in text, phrase


def test_pip_installs_of_serverless_gpu_are_reported_and_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.ipynb").write_text(notebook("!pip install -q serverless-gpu torch", "x = 1", markdown_first=False))
    (tmp_path / "b.py").write_text(DATABRICKS.replace("%pip install torch", "%pip install serverless_gpu"))
    before = (tmp_path / "a.ipynb").read_text()
    assert main(["--check", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{tmp_path}/a.ipynb:cell 1:1:17: AM110 manual ") for line in out)
    assert any(line.startswith(f"{tmp_path}/b.py:cell 1:2:22: AM110 manual ") for line in out)
    assert main([str(tmp_path)]) == 0  # reported, not blocking: b.py's code is migrated, the pip lines stay
    assert (tmp_path / "a.ipynb").read_text() == before
    assert "# MAGIC %pip install serverless_gpu\n" in (tmp_path / "b.py").read_text()
    assert "from databricks.air import distributed" in (tmp_path / "b.py").read_text()


def test_fix_pip_and_pip_package_rewrite_install_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = DATABRICKS.replace("%pip install torch", "%pip install serverless_gpu torch")
    path = tmp_path / "nb.py"
    path.write_text(source)
    assert main(["--fix-pip", str(path)]) == 0
    assert "# MAGIC %pip install databricks-sdk-air torch\n" in path.read_text()
    path.write_text(source)
    assert main(["--fix-pip", "--pip-package", "databricks-air-oss==0.3", str(path)]) == 0
    assert "# MAGIC %pip install databricks-air-oss==0.3 torch\n" in path.read_text()
    out = capsys.readouterr().out
    assert f"{path}:cell 1:2:22: AM110 " in out and " manual " not in out


def test_todo_comments_mark_a_blocked_file_and_the_summary_says_it_was_not_converted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.py"
    path.write_text(BLOCKED)
    assert main(["--todo-comments", str(path)]) == 0
    assert "# TODO(air-migrate AM105): " in path.read_text()
    assert "from serverless_gpu import distributed" in path.read_text()  # the conversion itself is not made
    assert capsys.readouterr().err.endswith(
        "1 changed (0 change(s)), 1 item(s) need a person, 0 failed; "
        "1 file(s) not converted because of blocking items (see --partial)\n"
    )
    path.write_text(BLOCKED)
    assert main(["--partial", str(path)]) == 0
    assert capsys.readouterr().err.endswith("1 changed (3 change(s)), 1 item(s) need a person, 0 failed\n")


def test_ctrl_c_leaves_every_file_whole_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.py").write_text(SCRIPT)
    (tmp_path / "b.py").write_text(SCRIPT)
    real = runner.migrate_file

    def interrupted(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("b.py"):
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(runner, "migrate_file", interrupted)
    assert main([str(tmp_path)]) == 130
    assert (tmp_path / "a.py").read_text() == SCRIPT_AFTER and (tmp_path / "b.py").read_text() == SCRIPT
    assert "interrupted; files already written are complete, the others are unchanged" in capsys.readouterr().err
