"""Listing a folder once, in an order that every process agrees on.

The listing is the sorted list of file paths relative to the root (POSIX separators), so the same folder gives
the same order on every rank and in every run. Its fingerprint (count and a hash of the paths) identifies it in
saved states and in the check that all ranks see the same files.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import stat as stat_module
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Pattern, Sequence, Tuple

from databricks.air.data.errors import DataPathNotADirectoryError, DataPathNotFoundError, EmptyDatasetError
from databricks.air.data.filesystem import VolumeFileSystem
from databricks.air.data.retry import RetryPolicy, call_with_retries

# Names a writer leaves behind while it works, or that mark metadata rather than data.
_HIDDEN_PREFIXES = (".", "_")
_HIDDEN_SUFFIXES = (".tmp", "~")


@dataclass(frozen=True)
class Listing:
    """The files of one folder, sorted by relative path."""

    root: str
    files: Tuple[str, ...]
    fingerprint: str = field(init=False)
    _prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(f"{len(self.files)}\n".encode())
        for name in self.files:
            digest.update(name.encode("utf-8", "surrogateescape") + b"\n")
        object.__setattr__(self, "fingerprint", digest.hexdigest()[:16])
        object.__setattr__(self, "_prefix", self.root.rstrip("/") + "/")

    @property
    def count(self) -> int:
        return len(self.files)

    def path(self, index: int) -> str:
        """Absolute path of file ``index``."""
        return self._prefix + self.files[index]  # once per file per epoch: cheaper than os.path.join

    def describe(self) -> dict:
        """The fingerprint as it appears in a saved state."""
        return {"count": self.count, "sha256": self.fingerprint}


def is_hidden(name: str) -> bool:
    """True for names skipped unless ``hidden=True``: ``.x``, ``_x``, ``x.tmp``, ``x~``."""
    return name.startswith(_HIDDEN_PREFIXES) or name.endswith(_HIDDEN_SUFFIXES)


def compile_patterns(patterns: Optional[Iterable[str]], argument: str) -> Optional[Pattern[str]]:
    """One regular expression matching any of the glob ``patterns`` (``None`` when there are none)."""
    if patterns is None:
        return None
    if isinstance(patterns, str):
        patterns = [patterns]
    patterns = list(patterns)
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"{argument} must be a glob string or a list of them, not {pattern!r}")
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def list_folder(
    root: str,
    *,
    recursive: bool,
    include: Optional[Pattern[str]],
    exclude: Optional[Pattern[str]],
    hidden: bool,
    allow_empty: bool,
    skip_dirs: Sequence[str],
    filesystem: VolumeFileSystem,
    retry: RetryPolicy,
) -> Listing:
    """List the files under ``root`` that the dataset yields; raise a clear error when there is nothing to list."""
    try:
        info = call_with_retries(lambda: filesystem.stat(root), f"stat {root}", retry)
    except FileNotFoundError:
        raise DataPathNotFoundError(
            f"UCVolumeDataset: {root} does not exist. Check the path; a Unity Catalog volume is mounted at "
            "/Volumes/<catalog>/<schema>/<volume>/, and any local or mounted folder works too.",
            path=root,
        ) from None
    if not stat_module.S_ISDIR(info.st_mode):
        name = os.path.basename(root)
        raise DataPathNotADirectoryError(
            f"UCVolumeDataset: {root} is a file, not a folder. Pass the folder that holds it, with "
            f"include=[{name!r}] to yield only this file.",
            path=root,
        )

    skip = {os.path.realpath(d) for d in skip_dirs}
    found: List[str] = []
    counts = {"hidden": 0, "filtered": 0}
    pending = [""]
    while pending:
        relative_dir = pending.pop()
        folder = os.path.join(root, relative_dir) if relative_dir else root
        entries = call_with_retries(lambda: filesystem.scandir(folder), f"list {folder}", retry)
        for entry in entries:
            relative = f"{relative_dir}/{entry.name}" if relative_dir else entry.name
            if not hidden and is_hidden(entry.name):
                counts["hidden"] += 1
                continue
            if entry.is_dir(follow_symlinks=False):
                if recursive and os.path.realpath(entry.path) not in skip:
                    pending.append(relative)
                continue
            if not entry.is_file(follow_symlinks=True):
                continue  # a broken link, a socket, a link to a folder (never followed: no loops)
            if include is not None and not include.match(relative):
                counts["filtered"] += 1
                continue
            if exclude is not None and exclude.match(relative):
                counts["filtered"] += 1
                continue
            found.append(relative)
    found.sort()
    if not found and not allow_empty:
        reasons = []
        if counts["hidden"]:
            reasons.append(f"{counts['hidden']} hidden name(s) skipped (hidden=True keeps them)")
        if counts["filtered"]:
            reasons.append(f"{counts['filtered']} file(s) left out by include/exclude")
        if not recursive:
            reasons.append("sub-folders are not read (recursive=True reads them)")
        detail = "; ".join(reasons) if reasons else "the folder is empty"
        raise EmptyDatasetError(
            f"UCVolumeDataset: no files to read under {root} ({detail}). An empty dataset would give every epoch "
            "zero batches; pass allow_empty=True if that is what you want. If the files were written just now on "
            "another machine, the mount may not show them yet: wait and build the dataset again."
        )
    return Listing(root, tuple(found))
