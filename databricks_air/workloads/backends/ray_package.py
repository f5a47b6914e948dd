"""The Ray job's working directory: everything a run needs on the cluster, in one zip that Ray ships to each node.

::

    spec.json              the run's spec, its paths relative to the working directory
    workload.yaml          the configuration as run
    hyperparameters.yaml   the parameters, when the workload has some
    code/<folder>/         the code snapshot (CODE_SOURCE_PATH on each node)
    deps/                  local files that environment.dependencies name (wheels, requirement files, projects)
    .air/private.json      the secrets' values, resolved here; read and removed at once on every node

The zip is handed to Ray as it is (a local ``.zip`` working directory), so Ray applies no ignore file of its own
to the snapshot, which already left out what ``.gitignore`` says. Ray stores the package in the cluster's GCS,
which the dashboard never shows; the job's metadata, entrypoint and runtime environment hold no secret.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import stat
import zipfile
from typing import Any, Dict, List, Tuple

from databricks.air.workloads import environments, registry
from databricks.air.workloads.backends.ray_node_host import PRIVATE_FILE
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import RunSpec

CODE = "code"
DEPENDENCIES = "deps"


def build(folder: RunFolder, private: Dict[str, Any], target: str) -> RunSpec:
    """Write the working directory of ``folder``'s run to the zip ``target``; return the spec as written there."""
    spec = folder.read_spec()
    dependencies, shipped = (ship_dependencies(spec.dependencies, spec.base_dir)
                             if spec.dependencies is not None else (None, {}))
    code_path = os.path.relpath(spec.code_path, os.path.dirname(folder.code_dir))
    relative = dataclasses.replace(spec, code_path=code_path, base_dir=DEPENDENCIES, submit_dir=".",
                                   dependencies=dependencies)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        _add_bytes(archive, registry.SPEC, json.dumps(relative.to_dict(), indent=1).encode())
        for name in (registry.CONFIG, registry.HYPERPARAMETERS):
            if os.path.isfile(folder.file(name)):
                archive.write(folder.file(name), name)
        _add_tree(archive, folder.code_dir, CODE)
        for name, source in sorted(shipped.items()):
            if os.path.isdir(source):
                _add_tree(archive, source, name)
            else:
                archive.write(source, name)
        _add_bytes(archive, PRIVATE_FILE, json.dumps(private).encode(), 0o600)
    return relative


def ship_dependencies(dependencies: List[str], base_dir: str) -> Tuple[List[str], Dict[str, str]]:
    """The entries as the nodes see them (pip runs in ``deps/``), and the local files to ship (``name ->
    source``): a file under the workload file's folder keeps its relative path (so that a requirements file's own
    relative references still hold); one elsewhere goes to ``deps/_outside/<n>/`` and its entry is rewritten."""
    shipped: Dict[str, str] = {}
    outside: Dict[str, str] = {}
    base = os.path.abspath(base_dir)
    rewritten = []
    for entry in dependencies:
        for path in environments.local_files(entry, base_dir):
            relative = os.path.relpath(path, base)
            if relative.startswith(os.pardir):
                outside.setdefault(path, f"_outside/{len(outside)}/{os.path.basename(path.rstrip(os.sep))}")
                shipped[f"{DEPENDENCIES}/{outside[path]}"] = path
            else:
                shipped[f"{DEPENDENCIES}/{relative}"] = path
        rewritten.append(_rewrite(entry, base_dir, outside))
    return rewritten, shipped


def _rewrite(entry: str, base_dir: str, outside: Dict[str, str]) -> str:
    """``entry`` with every word that names a file outside the workload's folder pointing at its shipped copy."""
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
        if path in outside:
            word, changed = outside[path], True
        result.append(prefix + word)
    return shlex.join(result) if changed else entry


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
    return dataclasses.replace(spec, code_path=os.path.join(root, spec.code_path),
                               base_dir=os.path.join(root, spec.base_dir), submit_dir=root)
