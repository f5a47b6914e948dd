"""What a code folder may hold that a snapshot must not copy as it is (special files, links out of it, sparse or
large files, a FIFO named .gitignore), and secrets that cannot become environment variables."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import List

import pytest

from databricks.air.workloads import snapshot
from databricks.air.workloads.errors import WorkloadFileError
from databricks.air.workloads.workload import CodeSource, GitPin

from workload_support import AIR, air, envelope, write_workload


def _tree(folder: Path) -> List[str]:
    """Every path below ``folder``, links as ``name -> target``."""
    found = []
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        found.append(f"{name} -> {os.readlink(path)}" if path.is_symlink() else name)
    return found


def _nothing_recorded() -> None:
    registry = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs"
    assert not registry.exists() or not [p for p in registry.iterdir() if p.name not in ("keys", ".lock")]
    assert envelope(air("list", "--all-status", "-o", "json"))["data"]["runs"] == []


# --- special files and links -----------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A code folder with a FIFO, a socket, links inside it (relative, absolute, to a folder) and links out of it."""
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text("SIZE = 1\n")
    (root / "train.py").write_text("print('hi')\n")
    os.mkfifo(root / "src" / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock"))
    listener.close()
    (root / "alias.py").symlink_to("train.py")
    (root / "absolute.py").symlink_to(root / "src" / "model.py")
    (root / "lib").symlink_to("src")
    (root / "etc").symlink_to("/etc")
    (root / "src" / "up").symlink_to("../../outside.txt")
    (tmp_path / "outside.txt").write_text("not code")
    return root


def test_special_files_and_links_out_are_left_out_with_a_note_and_links_in_are_kept(
    project: Path, tmp_path: Path
) -> None:
    source = CodeSource(str(project))
    assert snapshot.survey(source) == [
        "code_source: special files left out of the snapshot (only regular files, folders and links are copied): "
        "sock (a socket), src/pipe (a FIFO (named pipe))",
        "code_source: symbolic links left out of the snapshot, since they lead out of root_path (their targets would "
        f"not be in it): etc -> /etc, src/up -> {tmp_path}/outside.txt",
    ]
    taken = Path(snapshot.take(source, str(tmp_path / "code")))
    assert _tree(taken) == [
        "absolute.py -> src/model.py",
        "alias.py -> train.py",
        "lib -> src",
        "src",
        "src/model.py",
        "train.py",
    ]
    assert (taken / "absolute.py").read_text() == "SIZE = 1\n"  # it points into the snapshot, not at the original


def test_a_link_named_in_include_paths_is_followed_inside_root_path(project: Path, tmp_path: Path) -> None:
    taken = Path(snapshot.take(CodeSource(str(project), include_paths=("alias.py", "lib")), str(tmp_path / "code")))
    assert _tree(taken) == ["alias.py", "lib", "lib/model.py"]  # src/pipe and src/up left out
    assert (taken / "alias.py").read_text() == "print('hi')\n"


def test_the_notes_come_with_air_run_and_the_run_does_not_fail(project: Path, tmp_path: Path) -> None:
    path = write_workload(tmp_path, code_source={"root_path": "proj"}, command="ls")
    done = air("run", "-f", str(path), "--watch")
    assert done.returncode == 0, done.stderr
    assert "air: code_source: special files left out of the snapshot" in done.stderr
    assert "air: code_source: symbolic links left out of the snapshot" in done.stderr
    assert done.stdout.split() == ["absolute.py", "alias.py", "lib", "src", "train.py"]


def test_a_fifo_named_gitignore_is_no_rules_and_does_not_block(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("x")
    os.mkfifo(root / ".gitignore")
    path = write_workload(tmp_path, code_source={"root_path": "proj"}, command="true")
    done = air("run", "-f", str(path), "--dry-run", timeout=30)
    assert done.returncode == 0 and "special files left out of the snapshot" in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_a_file_that_cannot_be_read_fails_before_the_run_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "locked.py").write_text("x")
    (root / "locked.py").chmod(0)
    path = write_workload(tmp_path, code_source={"root_path": "proj"}, command="true")
    done = air("run", "-f", str(path))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: code_source: locked.py under root_path cannot be read (Permission denied): "
        "make it readable, or leave it out (.gitignore or include_paths)"
    )
    _nothing_recorded()


def test_an_unreadable_file_is_named_before_anything_is_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same check as above, where the tests run as root (who reads every file): access() is made to say no."""
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "locked.py").write_text("x")
    real_access = os.access
    monkeypatch.setattr(
        snapshot.os, "access", lambda path, mode: not str(path).endswith("locked.py") and real_access(path, mode)
    )
    with pytest.raises(WorkloadFileError) as raised:
        snapshot.survey(CodeSource(str(root)))
    assert str(raised.value) == (
        "code_source: src/locked.py under root_path cannot be read (Permission denied): "
        "make it readable, or leave it out (.gitignore or include_paths)"
    )


# --- sparse and large files ------------------------------------------------------------------------------------------


def test_a_sparse_file_is_copied_sparsely_and_a_large_snapshot_is_named(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    big = root / "data.bin"
    with big.open("wb") as stream:
        stream.truncate(1 << 30)  # 1 GiB of holes...
        stream.seek(512 << 20)
        stream.write(b"data in the middle")  # ...and a few bytes of data
    if big.stat().st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep sparse files")
    source = CodeSource(str(root))
    assert snapshot.survey(source, large=2 << 30) == []
    assert snapshot.survey(source) == [  # over the default 1 GiB
        "code_source: the snapshot is 1.0 GiB, copied into the run's folder for every run; the largest files: "
        "data.bin (1.0 GiB), train.py (12 bytes). Leave data out of it (.gitignore or include_paths) and read it "
        "from where it is"
    ]
    taken = Path(snapshot.take(source, str(tmp_path / "code")))
    copy = (taken / "data.bin").stat()
    assert copy.st_size == 1 << 30 and copy.st_blocks * 512 <= 1 << 20
    with (taken / "data.bin").open("rb") as stream:
        stream.seek((512 << 20) - 2)
        assert stream.read(22) == b"\0\0data in the middle\0\0"
    assert (taken / "train.py").read_text() == "print('hi')\n"


def test_copy_sparse_copies_content_mode_and_a_hole_at_the_end(tmp_path: Path) -> None:
    source, target = tmp_path / "a", tmp_path / "b"
    source.write_bytes(os.urandom(3 * 65536 + 17))
    with source.open("r+b") as stream:
        stream.truncate(10 << 20)
    source.chmod(0o750)
    snapshot.copy_sparse(str(source), str(target))
    assert target.read_bytes() == source.read_bytes()
    assert target.stat().st_mode & 0o777 == 0o750 and target.stat().st_mtime == source.stat().st_mtime


# --- git snapshots ---------------------------------------------------------------------------------------------------


def test_a_git_snapshot_leaves_out_links_out_of_root_path_with_a_note(tmp_path: Path) -> None:
    root = tmp_path / "repo" / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x")
    (root / "etc").symlink_to("/etc")
    (root / "src" / "up").symlink_to("../../elsewhere")
    (root / "src" / "alias").symlink_to("a.py")
    repo = root.parent
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    source = CodeSource(str(root), git=GitPin(branch="main"))
    assert snapshot.survey(source) == [
        "code_source: symbolic links left out of the snapshot, since they lead out of root_path (their targets would "
        "not be in it): etc -> /etc, src/up -> ../../elsewhere"
    ]
    taken = Path(snapshot.take(source, str(tmp_path / "code")))
    assert _tree(taken) == ["src", "src/a.py", "src/alias -> a.py"]
    with pytest.raises(WorkloadFileError) as raised:
        snapshot.survey(CodeSource(str(root), include_paths=("src", "nope"), git=GitPin(branch="main")))
    assert str(raised.value) == f"code_source.include_paths[1]: 'nope' is not in main under root_path ({root})"


# --- secrets ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            b"\xff\xfebinary",
            "is not UTF-8 text (byte 0 is 0xff), and a secret becomes an environment variable, which "
            "holds text: store binary values encoded, e.g. base64 FILE | air secrets put team/token",
        ),
        (
            b"a\0b",
            "holds a NUL byte (at byte 1), which no environment variable can hold: store it encoded, e.g. base64 "
            "FILE | air secrets put team/token",
        ),
    ],
)
def test_a_secret_that_cannot_be_an_environment_variable_is_named_with_why(
    tmp_path: Path, content: bytes, why: str
) -> None:
    stored = Path(os.environ["DATABRICKS_AIR_HOME"]) / "secrets" / "team" / "token"
    stored.parent.mkdir(parents=True, mode=0o700)
    stored.write_bytes(content)
    stored.chmod(0o600)
    path = write_workload(tmp_path, command="true", secrets={"TOKEN": "team/token"})
    done = air("run", "-f", str(path))
    assert (done.returncode, done.stderr.strip()) == (1, f"Error: secrets.TOKEN: secret team/token: {stored} {why}")
    _nothing_recorded()


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (b"\xff\xfebinary\n", "the value on stdin is not UTF-8 text (byte 0 is 0xff)"),
        (b"a\0b", "the value on stdin holds a NUL byte (at byte 1)"),
    ],
)
@pytest.mark.slow
def test_secrets_put_refuses_what_a_workload_could_not_use(given: bytes, why: str) -> None:
    done = subprocess.run([AIR, "secrets", "put", "team/token"], input=given, capture_output=True, timeout=60)
    assert done.returncode == 2 and f"Error: secret team/token: {why}" in done.stderr.decode()
    assert not (Path(os.environ["DATABRICKS_AIR_HOME"]) / "secrets" / "team" / "token").exists()
