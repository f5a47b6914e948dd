"""What a run gets besides its command: a code snapshot that nothing changes, secrets that are never printed, and
dependencies installed once into a cached environment."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import List

import pytest

from databricks.air.workloads import snapshot
from databricks.air.workloads.gitignore import IgnoreRules, parse_line
from databricks.air.workloads.node_output import REDACTED, NodeOutput, read_times
from databricks.air.workloads.workload import CodeSource, GitPin

from workload_support import air, envelope, make_wheel, state, submit, wait_for_end, write_workload

# --- .gitignore ------------------------------------------------------------------------------------------------------

# (rules, path, is a directory, ignored)
GITIGNORE_CASES = [
    (["*.log"], "train.log", False, True),
    (["*.log"], "logs/deep/train.log", False, True),
    (["*.log", "!keep.log"], "keep.log", False, False),
    (["build/"], "build", True, True),
    (["build/"], "build", False, False),  # a file named build is not the folder build/
    (["/data"], "data", True, True),
    (["/data"], "src/data", True, False),  # anchored at the top
    (["docs/*.md"], "docs/a.md", False, True),
    (["docs/*.md"], "docs/sub/a.md", False, False),  # * does not cross /
    (["**/cache"], "a/b/cache", True, True),
    (["logs/**"], "logs/a/b.txt", False, True),
    (["a/**/b"], "a/x/y/b", False, True),
    (["a/**/b"], "a/b", False, True),
    (["file?.txt"], "file1.txt", False, True),
    (["file[0-9].txt"], "fileA.txt", False, False),
    (["file[!0-9].txt"], "fileA.txt", False, True),
    (["\\#notes"], "#notes", False, True),
    (["# a comment", ""], "a comment", False, False),
    (["trailing   "], "trailing", False, True),
]


@pytest.mark.parametrize(
    ("rules", "path", "is_dir", "ignored"), GITIGNORE_CASES, ids=[f"{'|'.join(c[0])}:{c[1]}" for c in GITIGNORE_CASES]
)
def test_gitignore_rules(rules: List[str], path: str, is_dir: bool, ignored: bool) -> None:
    parsed = [rule for rule in (parse_line(line, "") for line in rules) if rule is not None]
    assert IgnoreRules(parsed).ignored(path, is_dir) is ignored


def _project(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "model.py").write_text("SIZE = 1\n")
    (root / "train.py").write_text("print('version 1')\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 10)
    (root / "notes.log").write_text("x")
    (root / "src" / ".gitignore").write_text("generated_*.py\n")
    (root / "src" / "generated_a.py").write_text("x")
    (root / "._train.py").write_text("AppleDouble")
    (root / ".gitignore").write_text("data/\n*.log\n")
    return root


def _files(folder: Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_working_tree_snapshot_honours_gitignore_files_and_drops_git(tmp_path: Path) -> None:
    root = _project(tmp_path / "project")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    taken = snapshot.take(CodeSource(str(root)), str(tmp_path / "code"))
    assert Path(taken) == tmp_path / "code" / "project"
    assert _files(Path(taken)) == [".gitignore", "src/.gitignore", "src/model.py", "train.py"]


def test_include_paths_take_only_those_even_when_ignored(tmp_path: Path) -> None:
    root = _project(tmp_path / "project")
    taken = snapshot.take(
        CodeSource(str(root), include_paths=("src", "data/big.bin", "notes.log")), str(tmp_path / "code")
    )
    assert _files(Path(taken)) == ["data/big.bin", "notes.log", "src/.gitignore", "src/model.py"]


def test_a_git_snapshot_is_the_commit_not_the_working_tree(tmp_path: Path) -> None:
    root = _project(tmp_path / "repo" / "project")
    repo = root.parent
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (root / "train.py").write_text("print('uncommitted')\n")
    (root / "untracked.py").write_text("x")
    taken = Path(snapshot.take(CodeSource(str(root), git=GitPin(branch="main")), str(tmp_path / "a")))
    assert (taken / "train.py").read_text() == "print('version 1')\n" and not (taken / "untracked.py").exists()
    pinned = Path(
        snapshot.take(CodeSource(str(root), include_paths=("src",), git=GitPin(commit=commit)), str(tmp_path / "b"))
    )
    assert _files(pinned) == ["src/.gitignore", "src/model.py"]
    from databricks.air.workloads.errors import WorkloadFileError

    with pytest.raises(WorkloadFileError, match="'nope' is not a commit or branch"):
        snapshot.take(CodeSource(str(root), git=GitPin(branch="nope")), str(tmp_path / "c"))


def test_editing_the_code_while_a_run_waits_changes_nothing_in_it(tmp_path: Path) -> None:
    root = _project(tmp_path / "project")
    gate = tmp_path / "gate"
    path = write_workload(
        tmp_path,
        code_source={"root_path": "project"},
        command=f"while [ ! -e {gate} ]; do sleep 0.05; done\npython train.py\nls",
    )
    run_id = submit(path)
    (root / "train.py").write_text("print('version 2')\n")
    (root / "train.py").rename(root / "moved.py")
    gate.touch()
    wait_for_end(run_id)
    assert state(run_id).status == "SUCCESS"
    assert air("logs", str(run_id)).stdout == "version 1\nsrc\ntrain.py\n"


# --- secrets ---------------------------------------------------------------------------------------------------------


def test_secrets_reach_the_command_and_are_never_printed_or_saved(tmp_path: Path) -> None:
    from_variable, from_file = "s3cr3t-from-the-environment", "hunter2-from-the-store"
    put = air("secrets", "put", "ml_team/db_password", stdin=from_file + "\n")
    assert put.returncode == 0, put.stderr
    stored = Path(os.environ["DATABRICKS_AIR_HOME"]) / "secrets" / "ml_team" / "db_password"
    assert stored.stat().st_mode & 0o777 == 0o600 and stored.read_text() == from_file
    assert air("secrets", "list").stdout.split()[0] == "ml_team/db_password"
    digests = " ".join(hashlib.sha256(value.encode()).hexdigest() for value in (from_variable, from_file))
    command = f"""echo "token: $HF_TOKEN, password: $DB_PASSWORD"
[ "$(printf %s "$HF_TOKEN" | sha256sum | cut -c1-64) $(printf %s "$DB_PASSWORD" | sha256sum | cut -c1-64)" \\
  = "{digests}" ] && echo match
python -c 'import os, sys; sys.stdout.write(os.environ["HF_TOKEN"][:9]); sys.stdout.flush(); print(os.environ["HF_TOKEN"][9:])'
"""
    path = write_workload(
        tmp_path, command=command, secrets={"HF_TOKEN": "ml_team/hf_token", "DB_PASSWORD": "ml_team/db_password"}
    )
    environ = {"DATABRICKS_AIR_SECRET_ML_TEAM__HF_TOKEN": from_variable}
    done = air("run", "-f", str(path), "--watch", env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "token: [REDACTED], password: [REDACTED]\nmatch\n[REDACTED]\n"
    run_id = int(done.stderr.split("air: run ")[1].split()[0])
    shown = [
        done.stderr,
        air("get", str(run_id)).stdout,
        air("get", str(run_id), "-o", "json").stdout,
        air("logs", str(run_id), "-o", "json").stdout,
        air("logs", str(run_id)).stdout,
    ]
    run_dir = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / str(run_id)
    saved = [p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()]
    for text in shown + saved:
        assert from_variable not in text and from_file not in text
    assert "DB_PASSWORD: ml_team/db_password" in (run_dir / "workload.yaml").read_text()


def test_secrets_the_workload_does_not_name_never_reach_the_command_and_are_redacted(tmp_path: Path) -> None:
    named, unnamed = "named-value-of-the-workload", "someone-elses-deploy-key"
    command = """env | grep -c DATABRICKS_AIR_SECRET_ || true
echo "token: $TOKEN"
echo "a value the command happens to print: someone-elses-$(echo deploy)-key"
"""
    path = write_workload(tmp_path, command=command, secrets={"TOKEN": "team/token"})
    environ = {"DATABRICKS_AIR_SECRET_TEAM__TOKEN": named, "DATABRICKS_AIR_SECRET_OPS__DEPLOY_KEY": unnamed}
    done = air("run", "-f", str(path), "--watch", env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\ntoken: [REDACTED]\na value the command happens to print: [REDACTED]\n"
    run_id = int(done.stderr.split("air: run ")[1].split()[0])
    run_dir = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / str(run_id)
    for saved in (p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file()):
        assert named not in saved and unnamed not in saved


def test_a_missing_or_readable_secret_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = write_workload(tmp_path, command="true", secrets={"TOKEN": "team/token"})
    done = air("run", "-f", str(path))
    assert done.returncode == 2
    assert "air secrets put team/token" in done.stderr and "DATABRICKS_AIR_SECRET_TEAM__TOKEN" in done.stderr
    assert air("secrets", "put", "team/token", "--value", "abcdef").returncode == 0
    stored = Path(os.environ["DATABRICKS_AIR_HOME"]) / "secrets" / "team" / "token"
    stored.chmod(0o644)
    done = air("run", "-f", str(path))
    assert done.returncode == 1 and f"chmod 600 {stored}" in done.stderr


def test_redaction_holds_across_writes_and_times_are_recorded(tmp_path: Path) -> None:
    found = []
    output = NodeOutput(
        str(tmp_path / "node_0.log"), str(tmp_path / "node_0.times"), ["topsecret", "ab"], on_alert=found.append
    )
    for part in (b"x=tops", b"ecr", b"et;\nthen ab and topsecre", b"t\nKilled\nno newline top"):
        output.feed(part)
    output.close()
    text = (tmp_path / "node_0.log").read_bytes()
    assert text == b"x=" + REDACTED + b";\nthen ab and " + REDACTED + b"\nKilled\nno newline top"
    assert [(m.line_number, m.pattern.id) for m in found] == [(3, "process-killed")]
    times = read_times(str(tmp_path / "node_0.times"))
    assert times and times[0][0] == 0


# --- dependencies ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dependencies_are_installed_once_and_reused(tmp_path: Path) -> None:
    make_wheel(tmp_path, "airtinypkg", "0.1", "VALUE = 42\n")
    (tmp_path / "requirements.txt").write_text("./airtinypkg-0.1-py3-none-any.whl\n")
    command = 'python -c "import airtinypkg, torch; print(airtinypkg.VALUE)"\npython -c "import sys; print(sys.prefix)"'
    path = write_workload(tmp_path, command=command, environment={"dependencies": ["-r requirements.txt"]})
    first = air("run", "-f", str(path), "--watch")
    assert first.returncode == 0, first.stdout + first.stderr
    assert (
        "[air] installing environment.dependencies" in first.stdout
        and "Successfully installed airtinypkg-0.1" in first.stdout
    )
    environment = first.stdout.splitlines()[-1]
    assert environment.startswith(str(Path(os.environ["DATABRICKS_AIR_HOME"]) / "envs"))
    second = air("run", "-f", str(path), "--watch")
    assert second.returncode == 0 and second.stdout == f"42\n{environment}\n"  # no pip this time
    make_wheel(tmp_path, "airtinypkg", "0.1", "VALUE = 43\n")  # the same name, other content: another environment
    third = air("run", "-f", str(path), "--watch")
    assert third.returncode == 0 and "43\n" in third.stdout and environment not in third.stdout


def test_dependencies_that_cannot_be_installed_fail_the_run_without_retries(tmp_path: Path) -> None:
    path = write_workload(
        tmp_path,
        command="echo never",
        max_retries=2,
        environment={"dependencies": ["no-such-package-of-air-tests==1.0"]},
    )
    done = air("run", "-f", str(path), "--watch", "-o", "json")
    assert done.returncode == 1
    final = envelope(done)["data"]
    assert final["status"] == "FAILED" and "installing environment.dependencies failed" in final["message"]
    run = state(final["run_id"])
    assert run.attempts == []
    assert "no-such-package-of-air-tests" in air("logs", str(final["run_id"])).stdout


def test_the_runs_folders_are_private_to_the_user(tmp_path: Path) -> None:
    home = Path(os.environ["DATABRICKS_AIR_HOME"])
    home.mkdir(mode=0o755)  # as an older version left it
    path = write_workload(tmp_path, command="echo private")
    done = air("run", "-f", str(path), "--watch")
    assert done.returncode == 0, done.stderr
    for folder in (home, home / "runs"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
