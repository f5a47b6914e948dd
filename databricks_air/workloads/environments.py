"""``environment.dependencies``: a cached virtual environment layered on the current one.

The first run with a list of requirements creates ``~/.air/envs/<key>/``: a virtual environment without pip of its
own that sees every package of the current environment (a ``.pth`` file adds the current site folders after its
own), into which pip installs only what the current environment lacks or has in another version. Later runs with
the same list, the same interpreter and the same files behind any local entry (``-r requirements.txt``, a wheel's
path) reuse it without running pip. The key is a hash of all of that; a lock per key makes concurrent runs build it
once; an environment counts as built only once pip succeeded.

The command then runs with the environment's ``bin`` first on ``PATH`` (so ``python`` and ``pip`` are its own) and
its site folder on ``PYTHONPATH``, so that scripts of the current environment, ``torchrun`` included, see the new
packages too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import venv
from typing import BinaryIO, Dict, List, Optional, Sequence, Tuple

from databricks.air.workloads import paths
from databricks.air.workloads.errors import WorkloadError
from databricks.air.workloads.registry import locked

_BUILT = ".built"
_PTH = "_databricks_air_parent.pth"


class DependencyInstallError(WorkloadError):
    """pip could not install ``environment.dependencies``."""


@dataclasses.dataclass(frozen=True)
class PreparedEnvironment:
    """A built environment: where it is and whether this run built it."""

    path: str
    reused: bool

    @property
    def bin_dir(self) -> str:
        return os.path.join(self.path, "bin")

    @property
    def site_dir(self) -> str:
        return _site_dir(self.path)

    def apply(self, environ: Dict[str, str]) -> None:
        """Make a command's environment use this one (``PATH``, ``PYTHONPATH``, ``VIRTUAL_ENV``)."""
        environ["PATH"] = os.pathsep.join(filter(None, [self.bin_dir, environ.get("PATH", "")]))
        environ["PYTHONPATH"] = os.pathsep.join(filter(None, [self.site_dir, environ.get("PYTHONPATH", "")]))
        environ["VIRTUAL_ENV"] = self.path


def _site_dir(prefix: str) -> str:
    return sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix})


def _parent_site_dirs() -> List[str]:
    found = []
    for folder in [
        *site.getsitepackages(),
        site.getusersitepackages(),
        sysconfig.get_path("purelib"),
        sysconfig.get_path("platlib"),
    ]:
        if folder and os.path.isdir(folder) and folder not in found:
            found.append(folder)
    return found


def _named_paths(requirement: str) -> Tuple[List[str], List[str]]:
    """The words of an entry that may name local files: ``(paths, requirement files)``, those after ``-r``/``-c``."""
    words = shlex.split(requirement, comments=True)
    candidates, listed = [], []
    for index, word in enumerate(words):
        if word in ("-r", "--requirement", "-c", "--constraint") and index + 1 < len(words):
            listed.append(words[index + 1])
        elif word.startswith(("-r", "-c")) and len(word) > 2 and not word.startswith("--"):
            listed.append(word[2:])
        elif word in ("-e", "--editable") and index + 1 < len(words):
            candidates.append(words[index + 1])
        elif not word.startswith("-"):
            candidates.append(word)
    return candidates, listed


def local_files(requirement: str, base_dir: str, depth: int = 0) -> List[str]:
    """The local files an entry depends on: a ``-r``/``-c`` file and what it names in turn, or a path to a wheel,
    an archive or a project folder (relative paths from ``base_dir``, where pip runs)."""
    candidates, listed = _named_paths(requirement)
    found = []
    for candidate in candidates + listed:
        path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(candidate)))
        if os.path.exists(path):
            found.append(path)
    for listing in listed:  # what a requirements file names changes the environment as much as the file itself
        path = os.path.join(base_dir, os.path.expanduser(listing))
        if os.path.isfile(path) and depth < 5:
            with open(path, encoding="utf-8", errors="replace") as stream:
                for line in stream:
                    found += local_files(line, base_dir, depth + 1)
    return found


def requirement_files(dependencies: Sequence[str], base_dir: str) -> List[str]:
    """The requirement and constraint files (``-r``/``-c``) that the entries name, and those these name in turn."""
    found: List[str] = []
    pending = list(dependencies)
    while pending:
        for listing in _named_paths(pending.pop())[1]:
            path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(listing)))
            if os.path.isfile(path) and path not in found and len(found) < 100:
                found.append(path)
                with open(path, encoding="utf-8", errors="replace") as stream:
                    pending += stream.readlines()
    return found


def _fingerprint(path: str) -> str:
    digest = hashlib.sha256()
    if os.path.isdir(path):  # a local project: its files' names, sizes and times
        for folder, dirs, files in sorted(os.walk(path)):
            dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__", "build"))
            for name in sorted(files):
                info = os.stat(os.path.join(folder, name))
                digest.update(
                    f"{os.path.relpath(os.path.join(folder, name), path)}:{info.st_size}:{info.st_mtime_ns}".encode()
                )
        return digest.hexdigest()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_fingerprint(dependencies: Sequence[str], base_dir: str) -> Dict[str, str]:
    """The content of every local file the entries depend on, as one hash per file."""
    return {path: _fingerprint(path) for entry in dependencies for path in local_files(entry, base_dir)}


def environment_key(dependencies: Sequence[str], base_dir: str) -> str:
    """What identifies an environment: the interpreter, the current environment, the entries and their files."""
    files = files_fingerprint(dependencies, base_dir)
    identity = {
        "python": os.path.realpath(sys.executable),
        "version": sys.version,
        "prefix": sys.prefix,
        "dependencies": list(dependencies),
        "files": files,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]


def prepare(dependencies: Sequence[str], base_dir: str, log: BinaryIO) -> PreparedEnvironment:
    """The environment for ``dependencies``, built now (pip's output to ``log``) or reused.

    Raises:
        DependencyInstallError: pip failed; its output is in ``log``.
    """
    root = paths.envs_dir()
    os.makedirs(root, mode=0o700, exist_ok=True)
    key = environment_key(dependencies, base_dir)
    path = os.path.join(root, key)
    with locked(path + ".lock"):
        if os.path.exists(os.path.join(path, _BUILT)):
            os.utime(os.path.join(path, _BUILT))  # when it was last used, for whoever cleans the cache
            return PreparedEnvironment(path, reused=True)
        if os.path.exists(path):  # an earlier build that did not finish
            shutil.rmtree(path)
        _build(path, dependencies, base_dir, log)
        return PreparedEnvironment(path, reused=False)


def _build(path: str, dependencies: Sequence[str], base_dir: str, log: BinaryIO) -> None:
    started = time.monotonic()
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt", clear=True).create(path)
    site_dir = _site_dir(path)
    os.makedirs(site_dir, exist_ok=True)
    # addsitedir (not a bare path) so that the current environment's own .pth files (editable installs) apply too.
    with open(os.path.join(site_dir, _PTH), "w", encoding="utf-8") as stream:
        for folder in _parent_site_dirs():
            stream.write(f"import site; site.addsitedir({folder!r})\n")
    python = os.path.join(path, "bin", "python")
    arguments = _requirement_arguments(dependencies)
    if not arguments:
        _mark_built(path, dependencies)
        return
    command = _pip_command(python) + ["install", "--disable-pip-version-check", "--no-input", *arguments]
    log.write(f"[air] installing environment.dependencies into {path}\n[air] $ {shlex.join(command)}\n".encode())
    log.flush()
    environ = {**os.environ, "PIP_REQUIRE_VIRTUALENV": "0", "VIRTUAL_ENV": path}
    environ.pop("PYTHONPATH", None)
    done = subprocess.run(
        command, cwd=base_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environ
    )
    if done.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise DependencyInstallError(
            f"installing environment.dependencies failed (pip exited with status {done.returncode}); pip's output "
            "is in the log of attempt 0 (air logs RUN_ID --retry 0)"
        )
    log.write(
        f"[air] environment ready in {time.monotonic() - started:.1f} s; later runs with the same "
        "dependencies reuse it\n".encode()
    )
    log.flush()
    _mark_built(path, dependencies)


def _requirement_arguments(dependencies: Sequence[str]) -> List[str]:
    """pip's arguments for the entries: options split as a requirements file would (``-r file``), others as is."""
    arguments: List[str] = []
    for entry in dependencies:
        entry = entry.strip()
        if not entry:
            continue
        arguments += shlex.split(entry) if entry.startswith("-") else [entry]
    return arguments


def _pip_command(python: str) -> List[str]:
    """pip as the environment's interpreter runs it (it sees the current environment's pip); else uv's."""
    probe = subprocess.run([python, "-c", "import pip"], capture_output=True)
    if probe.returncode == 0:
        return [python, "-m", "pip"]
    uv = shutil.which("uv")
    if uv:
        return [uv, "pip", "--python", python]
    raise DependencyInstallError(
        "environment.dependencies need pip (or uv), and neither is installed here: "
        f"{sys.executable} -m ensurepip, or pip install pip"
    )


def _mark_built(path: str, dependencies: Sequence[str]) -> None:
    with open(os.path.join(path, _BUILT), "w", encoding="utf-8") as stream:
        json.dump({"dependencies": list(dependencies), "python": sys.executable, "built_at": time.time()}, stream)


def describe(dependencies: Optional[Sequence[str]]) -> str:
    """The environment as ``get`` shows it."""
    if dependencies is None:
        return "the current Python environment"
    if not dependencies:
        return "the current Python environment (no extra dependencies)"
    return "current environment + " + ", ".join(dependencies)
