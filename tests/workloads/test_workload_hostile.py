"""Hostile workload files: each refused by the real ``air run -f`` with exit status 2, one line naming the field and
what to do, and nothing recorded (no run folder, nothing in ``air list``).

The files are ``tests/hostile/*.yaml``, each with its line in its first line (see the README there); what cannot be
a file in a repository (a FIFO, ``/dev/zero``, symbolic links, a git repository, a NUL byte, a file over 1 MiB) is
made here at run time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from workload_support import air, envelope

CORPUS = Path(__file__).resolve().parent.parent / "hostile"
FILES = sorted(CORPUS.glob("*.yaml"))
EXPECTED = re.compile(r"^# air run -f (?P<name>\S+) prints, and exits 2: (?P<line>.+)$")
BASE = (
    'experiment_name: hostile\ncompute: {accelerator_type: CPU, num_accelerators: 1}\ncommand: "true"\nmax_retries: 0\n'
)
NOT_A_FILE = "not a regular file: write the workload to a file and give its path"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """What each case runs in (the command's working folder): ``proj/``, a code folder that is no git repository,
    and ``home/``, the command's HOME."""
    here = Path(os.path.realpath(tmp_path))
    (here / "proj" / "src").mkdir(parents=True)
    (here / "proj" / "train.py").write_text("print('hello')\n")
    (here / "home").mkdir()
    return here


def _refused(folder: Path, args: List[str], expected: str) -> None:
    """``air run ARGS`` exits 2 with exactly ``expected`` on stderr, and nothing was recorded."""
    done = air("run", *args, env={"HOME": str(folder / "home")}, timeout=30)
    assert (done.returncode, done.stderr.strip(), done.stdout) == (2, expected.replace("{dir}", str(folder)), "")
    listed = air("list", "--all-status", "--all-users", "-o", "json")
    assert listed.returncode == 0 and envelope(listed)["data"]["runs"] == []
    registry = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs"
    if registry.exists():
        kept = sorted(str(path.relative_to(registry)) for path in registry.rglob("*") if path.name != ".lock")
        assert kept in ([], ["keys"])


def test_the_corpus_has_a_line_for_each_file() -> None:
    assert len(FILES) >= 20
    for path in FILES:
        match = EXPECTED.match(path.read_text().splitlines()[0])
        assert match and match["name"] == path.name, path.name


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_each_file_of_the_corpus_is_refused_with_its_line_and_nothing_recorded(folder: Path, path: Path) -> None:
    match = EXPECTED.match(path.read_text().splitlines()[0])
    assert match is not None
    shutil.copy(path, folder / path.name)
    _refused(folder, ["-f", path.name], match["line"])


# --- made at run time: (what is made, the arguments of air run, the line) ---------------------------------------------


def _fifo(folder: Path) -> None:
    os.mkfifo(folder / "w.yaml")


def _link_to_dev_zero(folder: Path) -> None:
    (folder / "w.yaml").symlink_to("/dev/zero")


def _over_one_mebibyte(folder: Path) -> None:
    (folder / "w.yaml").write_text(BASE + "#" * (1 << 20))


def _nul_byte(folder: Path) -> None:
    (folder / "w.yaml").write_bytes(BASE.encode() + b"env_variables: {A: x\0y}\n")


def _workload(code_source: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / "w.yaml").write_text(BASE + f"code_source: {code_source}\n")

    return make


def _with_links(code_source: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / "proj" / "etclink").symlink_to("/etc")
        (folder / "proj" / "rootlink").symlink_to("/")
        _workload(code_source)(folder)

    return make


def _in_a_repository(code_source: str) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        git = ["git", "-C", str(folder / "proj"), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(["git", "init", "-q", "-b", "main", str(folder / "proj")], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-qm", "one"], check=True)
        _workload(code_source)(folder)

    return make


MADE: Dict[str, Tuple[Callable[[Path], None], List[str], str]] = {
    "fifo": (_fifo, ["-f", "w.yaml"], f"Error: w.yaml: is a FIFO (named pipe), {NOT_A_FILE}"),
    "dev-zero": (lambda folder: None, ["-f", "/dev/zero"], f"Error: /dev/zero: is a character device, {NOT_A_FILE}"),
    "dev-urandom": (
        lambda folder: None,
        ["-f", "/dev/urandom"],
        f"Error: /dev/urandom: is a character device, {NOT_A_FILE}",
    ),
    "link-to-dev-zero": (_link_to_dev_zero, ["-f", "w.yaml"], f"Error: w.yaml: is a character device, {NOT_A_FILE}"),
    "a-folder": (lambda folder: None, ["-f", "proj"], "Error: proj: is a directory, not a workload file"),
    "over-one-mebibyte": (
        _over_one_mebibyte,
        ["-f", "w.yaml"],
        "Error: w.yaml: is more than 1 MiB; a workload file may be at most 1 MiB (put data in a file of code_source)",
    ),
    "nul-byte": (
        _nul_byte,
        ["-f", "w.yaml"],
        "Error: w.yaml: is not valid YAML: the character #x0000 is not allowed in YAML at line 5, column 21",
    ),
    "include-through-a-link": (
        _with_links("{root_path: proj, include_paths: [train.py, etclink/passwd]}"),
        ["-f", "w.yaml"],
        "Error: code_source.include_paths[1]: 'etclink/passwd' leads out of "
        "root_path, through a symbolic link, to /etc/passwd: only what is under root_path can "
        "be included (copy it there, or point root_path higher)",
    ),
    "include-a-link-out": (
        _with_links("{root_path: proj, include_paths: [etclink]}"),
        ["-f", "w.yaml"],
        "Error: code_source.include_paths[0]: 'etclink' leads out of root_path, through a symbolic "
        "link, to /etc: only what is under root_path can be included (copy it there, or point "
        "root_path higher)",
    ),
    "root-path-a-link-to-slash": (
        _with_links("{root_path: proj/rootlink}"),
        ["-f", "w.yaml"],
        "Error: code_source.root_path: {dir}/proj/rootlink (that is, /) is the whole file "
        "system, which the snapshot would copy into every run: point root_path at your "
        "project's folder (root_path: . is the workload file's folder)",
    ),
    "git-branch-missing": (
        _in_a_repository("{root_path: proj, git: {branch: nope}}"),
        ["-f", "w.yaml"],
        "Error: code_source.git.branch: 'nope' is not a commit or branch of the repository at {dir}/proj",
    ),
    "git-include-path-missing": (
        _in_a_repository("{root_path: proj, git: {branch: main}, include_paths: [train.py, missing.py]}"),
        ["-f", "w.yaml"],
        "Error: code_source.include_paths[1]: 'missing.py' is not in main under root_path ({dir}/proj)",
    ),
    "override-an-alias": (
        _workload("{root_path: proj}"),
        ["-f", "w.yaml", "--override", "parameters.a=&x [1]"],
        "Error: --override 'parameters.a=&x [1]': the value has the YAML anchor &x (line 1): "
        "anchors and aliases are not supported in a workload file; write the value out in full",
    ),
    "override-a-nul": (
        _workload("{root_path: proj}"),
        ["-f", "w.yaml", "--override", 'command="a\\0b"'],
        "Error: command: holds a NUL character (\\0) at character 2, which no command, path or "
        "environment variable can hold: remove it",
    ),
    "override-root-path-slash": (
        _workload("{root_path: proj}"),
        ["-f", "w.yaml", "--override", "code_source.root_path=/"],
        "Error: code_source.root_path: / is the whole file system, which the snapshot would "
        "copy into every run: point root_path at your project's folder (root_path: . is the "
        "workload file's folder)",
    ),
}


@pytest.mark.parametrize("case", MADE, ids=list(MADE))
def test_each_case_made_at_run_time_is_refused_with_its_line_and_nothing_recorded(folder: Path, case: str) -> None:
    make, args, line = MADE[case]
    make(folder)
    _refused(folder, args, line)
