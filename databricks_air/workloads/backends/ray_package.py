"""The Ray job's working directory: everything a run needs on the cluster, in one zip that Ray ships to each node.

::

    spec.json              the run's spec, its paths relative to the working directory
    workload.yaml          the configuration as run
    hyperparameters.yaml   the parameters, when the workload has some
    code/<folder>/         the code snapshot (CODE_SOURCE_PATH on each node)
    deps/                  local files that environment.dependencies name (wheels, requirement files, projects)
    .air/private.json      the secrets' values, resolved here; read and removed at once on every node

    pip.json               the runtime environment's pip field of the node hosts, when there are dependencies

``environment.dependencies`` become the ``pip`` list of the runtime environment of the job's node hosts
(:func:`pip_field`; the rest of the job's runtime environment is theirs too): Ray installs them on each node, after
unpacking the working directory there, before the host starts. Every local path in them (and in the requirement
files they name, whose shipped copies are rewritten) names its copy under ``deps/`` through Ray's
``${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}``, which pip expands. The supervisor keeps the cluster's own environment:
a workload's pins (an older MLflow...) never reach the code that runs the workload.

The zip is handed to Ray as it is (a local ``.zip`` working directory), so Ray applies no ignore file of its own
to the snapshot, which already left out what ``.gitignore`` says. Ray stores the package in the cluster's GCS,
which the dashboard never shows; the job's metadata, entrypoint and runtime environment hold no secret.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import stat
import zipfile
from typing import Any, Dict, List, Optional, Tuple

from databricks.air.workloads import environments, registry
from databricks.air.workloads.backends.ray_node_host import PRIVATE_FILE
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import RunSpec

CODE = "code"
DEPENDENCIES = "deps"
PIP_FILE = "pip.json"


WORKING_DIR = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}"
"""The job's working directory on a node, as Ray's runtime environment agent sets it while pip runs there."""
PIP_OPTIONS = ["--disable-pip-version-check", "--no-cache-dir", "--no-input"]
_FILES_MARK = "# databricks.air: local files"


def build(folder: RunFolder, private: Dict[str, Any], target: str) -> RunSpec:
    """Write the working directory of ``folder``'s run to the zip ``target``; return the spec as written there."""
    spec = folder.read_spec()
    dependencies, shipped, rewritten = (
        ship_dependencies(spec.dependencies, spec.base_dir) if spec.dependencies is not None else (None, {}, {})
    )
    code_path = os.path.relpath(spec.code_path, os.path.dirname(folder.code_dir))
    relative = dataclasses.replace(
        spec, code_path=code_path, base_dir=DEPENDENCIES, submit_dir=".", dependencies=dependencies
    )
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_bytes(archive, registry.SPEC, json.dumps(relative.to_dict(), indent=1).encode())
        for name in (registry.CONFIG, registry.HYPERPARAMETERS):
            if os.path.isfile(folder.file(name)):
                archive.write(folder.file(name), name)
        _add_tree(archive, folder.code_dir, CODE)
        for name, source in sorted(shipped.items()):
            if name in rewritten:
                _add_bytes(archive, name, rewritten[name])
            elif os.path.isdir(source):
                _add_tree(archive, source, name)
            else:
                archive.write(source, name)
        pip = pip_field(relative, spec)
        if pip is not None:
            _add_bytes(archive, PIP_FILE, json.dumps(pip, indent=1).encode())
        _add_bytes(archive, PRIVATE_FILE, json.dumps(private).encode(), 0o600)
    return relative


def pip_field(shipped: RunSpec, submitted: RunSpec) -> Optional[Dict[str, Any]]:
    """The runtime environment's ``pip`` field of a run: its entries as :func:`build` wrote them in ``shipped``, the
    local files they name found from ``submitted`` (``None``: nothing to install).

    Ray keys the environments it builds by this field's text; a comment line with the local files' hashes makes a
    changed wheel or project a new environment, rather than the one built from its previous content.
    """
    packages = [entry for entry in shipped.dependencies or [] if entry.strip()]
    if not packages:
        return None
    files = environments.files_fingerprint(submitted.dependencies or [], submitted.base_dir)
    if files:
        digest = hashlib.sha256(json.dumps(sorted(files.values())).encode()).hexdigest()[:20]
        packages = [f"{_FILES_MARK} {digest}", *packages]
    return {"packages": packages, "pip_check": False, "pip_install_options": list(PIP_OPTIONS)}


def read_pip_field(root: str) -> Optional[Dict[str, Any]]:
    """The node hosts' ``pip`` field in a working directory made by :func:`build` (``None``: no dependencies)."""
    try:
        with open(os.path.join(root, PIP_FILE), encoding="utf-8") as stream:
            return dict(json.load(stream))
    except FileNotFoundError:
        return None


def install_failure(ray_message: str, where: str) -> str:
    """What a run says when Ray's runtime environment could not install its ``environment.dependencies``:
    ``ray_message`` is Ray's report (pip's output in it), ``where`` names the node."""
    said = [line.strip() for line in ray_message.splitlines() if line.strip().startswith("ERROR:")]
    if not said:  # not pip's own words (the virtual environment, Ray's check that pip left Ray alone...)
        lines = [line.strip() for line in ray_message.splitlines() if line.strip()]
        said = lines[-3:]
    shown = "\n".join(f"  {line}" for line in dict.fromkeys(said))
    return (
        f"installing environment.dependencies {where} failed: Ray's runtime environment (pip) said\n{shown}\n"
        "Check the entries (a name and version that exist, a local wheel or project under the workload file's "
        "folder), and that the cluster's nodes reach their package index (pip's settings in the nodes' environment: "
        "PIP_INDEX_URL...); Ray's whole log of the installation is the node's runtime_env_setup-*.log."
    )


def ship_dependencies(dependencies: List[str], base_dir: str) -> Tuple[List[str], Dict[str, str], Dict[str, bytes]]:
    """The entries as pip reads them on the nodes, the local files to ship (``name -> source``) and the shipped
    requirement files' rewritten text (``name -> bytes``).

    A file under the workload file's folder keeps its relative path under ``deps/`` (so that a requirement file's
    own relative ``-r`` references still hold); one elsewhere goes to ``deps/_outside/<n>/``. Every local path in
    the entries and in the requirement files becomes ``${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/deps/...``: pip runs in
    a folder of Ray's, not in the working directory.
    """
    shipped: Dict[str, str] = {}
    names: Dict[str, str] = {}  # absolute path -> its name in the working directory
    base = os.path.abspath(base_dir)
    outside = 0
    for entry in dependencies:
        for path in environments.local_files(entry, base_dir):
            if path in names:
                continue
            relative = os.path.relpath(path, base)
            if relative.startswith(os.pardir):
                relative, outside = f"_outside/{outside}/{os.path.basename(path.rstrip(os.sep))}", outside + 1
            names[path] = f"{DEPENDENCIES}/{relative}"
            shipped[names[path]] = path
    rewritten = {}
    for path in environments.requirement_files(dependencies, base_dir):
        with open(path, encoding="utf-8", errors="replace") as stream:
            lines = [_rewrite(line.rstrip("\n"), base_dir, names) for line in stream]
        rewritten[names[path]] = ("\n".join(lines) + "\n").encode()
    return [_rewrite(entry, base_dir, names) for entry in dependencies], shipped, rewritten


def _rewrite(entry: str, base_dir: str, names: Dict[str, str]) -> str:
    """``entry`` with every word that names a shipped file pointing at its copy in the job's working directory."""
    try:
        words = shlex.split(entry, comments=True)
    except ValueError:
        return entry
    changed, result = False, []
    for word in words:
        prefix = ""
        if word.startswith(("-r", "-c")) and len(word) > 2 and not word.startswith("--"):
            prefix, word = word[:2], word[2:]
        path = os.path.abspath(os.path.join(base_dir, os.path.expanduser(word)))
        if path in names:
            word, changed = f"{WORKING_DIR}/{names[path]}", True
        result.append(prefix + word)
    return " ".join(result) if changed else entry  # pip splits a line on blanks; it would keep shlex's quotes


def _add_bytes(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFREG | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _add_tree(archive: zipfile.ZipFile, source: str, name: str) -> None:
    """``source`` as ``name/``: folders (empty ones too), files by content with their modes (a symbolic link to a
    file is followed)."""
    for folder, dirs, files in os.walk(source):
        dirs.sort()
        inside = os.path.normpath(os.path.join(name, os.path.relpath(folder, source)))
        archive.write(folder, inside + "/")
        for entry in sorted(files):
            path = os.path.join(folder, entry)
            if os.path.isfile(path):
                archive.write(path, f"{inside}/{entry}")


def read_spec(root: str) -> RunSpec:
    """The spec in a working directory made by :func:`build`, its paths made absolute under ``root``."""
    with open(os.path.join(root, registry.SPEC), encoding="utf-8") as stream:
        spec = RunSpec.from_dict(json.load(stream))
    return dataclasses.replace(
        spec, code_path=os.path.join(root, spec.code_path), base_dir=os.path.join(root, spec.base_dir), submit_dir=root
    )
