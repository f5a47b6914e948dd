"""The code snapshot: ``code_source`` copied into the run's folder when the run is submitted.

So editing, checking out or deleting files while a run waits or runs changes nothing in it (and each retry starts
from the same code). A working-tree snapshot copies ``root_path`` (or its ``include_paths``) without ``.git``,
AppleDouble files (``._*``), what ``.gitignore`` files ignore (:mod:`.gitignore`), and this tool's own home; a
path named in ``include_paths`` is copied even if ignored (inside it, the ignore rules apply). A ``git`` snapshot
is ``git archive`` of the branch's or commit's tree at ``root_path`` (tracked files only).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from typing import Optional, Sequence

from databricks.air.workloads import paths
from databricks.air.workloads.errors import WorkloadFileError
from databricks.air.workloads.gitignore import IgnoreRules, rules_above
from databricks.air.workloads.workload import CodeSource


def take(source: CodeSource, destination_parent: str, field: str = "code_source") -> str:
    """Snapshot ``source`` into ``destination_parent/<root folder's name>``; return that folder."""
    name = os.path.basename(source.root_path.rstrip(os.sep)) or "code"
    destination = os.path.join(destination_parent, name)
    os.makedirs(destination)
    if source.git is not None:
        _git_archive(source, destination, field)
    else:
        _copy_tree(source.root_path, destination, source.include_paths, field)
    return destination


def _copy_tree(root: str, destination: str, include: Optional[Sequence[str]], field: str) -> None:
    rules, prefix = rules_above(root)
    skip = {os.path.realpath(paths.air_home())}  # never copy the registry into itself
    if include is None:
        _copy_folder(root, destination, "", rules, prefix, skip)
        return
    for entry in include:
        source = os.path.join(root, entry)
        target = os.path.join(destination, entry)
        relative = entry.replace(os.sep, "/")
        if os.path.isdir(source) and not os.path.islink(source):
            folder_rules = _rules_down_to(root, relative, rules, prefix)
            os.makedirs(target, exist_ok=True)
            _copy_folder(source, target, relative, folder_rules, prefix, skip)
        elif os.path.lexists(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
        else:
            raise WorkloadFileError(path=f"{field}.include_paths", problem=f"{entry!r} does not exist under {root}")


def _rules_down_to(root: str, relative: str, rules: IgnoreRules, prefix: str) -> IgnoreRules:
    """The rules in force inside ``root/relative``: the .gitignore files of root and of each folder on the way."""
    folder, base = root, prefix
    rules = rules.with_file(os.path.join(folder, ".gitignore"), base)
    for part in relative.split("/")[:-1]:
        folder, base = os.path.join(folder, part), _join(base, part)
        rules = rules.with_file(os.path.join(folder, ".gitignore"), base)
    return rules


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def _copy_folder(source: str, target: str, relative: str, rules: IgnoreRules, prefix: str, skip: set) -> None:
    """Copy ``source`` (``relative`` to the code root) into ``target``, ignore rules of ``source`` itself added."""
    here = rules.with_file(os.path.join(source, ".gitignore"), _join(prefix, relative))
    with os.scandir(source) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == ".git" or entry.name.startswith("._"):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if here.ignored(_join(prefix, relative, entry.name), is_dir):
                continue
            destination = os.path.join(target, entry.name)
            if is_dir:
                if os.path.realpath(entry.path) in skip:
                    continue
                os.mkdir(destination)
                _copy_folder(entry.path, destination, _join(relative, entry.name), here, prefix, skip)
            else:
                shutil.copy2(entry.path, destination, follow_symlinks=False)


def _git_archive(source: CodeSource, destination: str, field: str) -> None:
    pin = source.git
    assert pin is not None
    revision = pin.commit or pin.branch
    where = f"{field}.git.{'commit' if pin.commit else 'branch'}"
    root = source.root_path
    prefix = _git(root, ["rev-parse", "--show-prefix"], f"{field}.root_path",
                  f"{root} is not inside a git repository, so git: cannot be used").strip()
    commit = _git(root, ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], where,
                  f"{revision!r} is not a commit or branch of the repository at {root}").strip()
    tree = f"{commit}:{prefix.rstrip('/')}" if prefix else commit
    arguments = ["archive", "--format=tar", tree]
    if source.include_paths:
        arguments += ["--", *source.include_paths]
    top = _git(root, ["rev-parse", "--show-toplevel"], where, "cannot find the repository's top").strip()
    data = _git(top, arguments, f"{field}.include_paths" if source.include_paths else where,
                f"git archive of {revision} failed", binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:  # type: ignore[arg-type]
        if hasattr(tarfile, "data_filter"):
            archive.extractall(destination, filter="data")
        else:  # pragma: no cover - Python before 3.10.12 / 3.11.4
            archive.extractall(destination)


def _git(folder: str, arguments: Sequence[str], path: str, failure: str, binary: bool = False):  # type: ignore[no-untyped-def]
    try:
        done = subprocess.run(["git", "-C", folder, *arguments], capture_output=True, timeout=300)
    except FileNotFoundError:
        raise WorkloadFileError(path=path, problem="needs git, which is not installed") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise WorkloadFileError(path=path, problem=failure + (f" ({detail[-1]})" if detail else ""))
    return done.stdout if binary else done.stdout.decode()
