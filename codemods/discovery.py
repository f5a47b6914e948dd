"""Which files a run looks at: the files named, and the ``*.py``/``*.ipynb`` files under the directories named.

Directories that never hold the user's own sources (version control, virtual environments, installed packages,
caches and Jupyter's checkpoint copies) are not entered. ``--exclude`` patterns are shell globs matched against
the path and each of its trailing parts, so ``--exclude build`` skips every ``build`` directory and
``--exclude 'tests/*.py'`` skips the scripts under any ``tests`` directory.
"""

from __future__ import annotations

import fnmatch
import os
from typing import AbstractSet, Iterable, List, Sequence, Set

SKIPPED_DIRECTORIES = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "site-packages", "__pycache__", ".ipynb_checkpoints", ".tox", ".nox"}
)
SOURCE_SUFFIXES = (".py", ".ipynb")


def discover(paths: Sequence[str], excludes: Sequence[str] = (), prune: AbstractSet[str] = frozenset()) -> List[str]:
    """The files to migrate, each once, sorted.

    A file named on the command line is taken whatever its suffix (unless excluded); ``prune`` holds real paths of
    directories never to enter (the ``--out-dir`` a run writes into).
    """
    found: Set[str] = set()
    for path in paths:
        path = os.path.normpath(path)
        if _excluded(path, excludes):
            continue
        if os.path.isdir(path):
            found.update(_walk(path, excludes, prune))
        else:
            found.add(path)
    return sorted(found)


def _walk(top: str, excludes: Sequence[str], prune: AbstractSet[str]) -> Iterable[str]:
    for root, directories, files in os.walk(top):
        directories[:] = [
            name
            for name in directories
            if name not in SKIPPED_DIRECTORIES
            and not _excluded(os.path.join(root, name), excludes)
            and not (prune and os.path.realpath(os.path.join(root, name)) in prune)
        ]
        for name in files:
            candidate = os.path.normpath(os.path.join(root, name))
            if name.endswith(SOURCE_SUFFIXES) and not _excluded(candidate, excludes):
                yield candidate


def _excluded(path: str, excludes: Sequence[str]) -> bool:
    if not excludes:
        return False
    parts = path.replace(os.sep, "/").split("/")
    tails = ["/".join(parts[index:]) for index in range(len(parts))]
    return any(fnmatch.fnmatchcase(tail, pattern) for pattern in excludes for tail in tails)
