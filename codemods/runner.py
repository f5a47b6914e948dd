"""Running files through the engine: one at a time, or in a pool of processes with ``-j``.

Each file is migrated by a fresh call of :func:`air_migrate.engine.migrate_file` (which builds fresh rule objects),
so nothing one file finds can leak into another's report, whichever worker ran it. Results come back in the order
of the paths given, with each file's records sorted by position, so the output of a run does not depend on ``-j``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator, Optional, Sequence, Tuple

from air_migrate.engine import migrate_file
from air_migrate.results import FileResult, Record
from air_migrate.rule_base import AnyRule
from air_migrate.sources import is_notebook


@dataclasses.dataclass(frozen=True)
class Options:
    """What the command line passes to the engine for every file."""

    rules: Tuple[AnyRule, ...]
    partial: bool = False
    fix_pip: bool = False
    pip_package: Optional[str] = None
    todo_comments: bool = False


def migrate_bytes(path: str, data: bytes, options: Options) -> FileResult:
    """Migrate ``data`` as the file ``path``; a bug in a rule becomes this file's error, never the run's end."""
    try:
        result = migrate_file(
            path,
            data,
            options.rules,
            options.partial,
            fix_pip=options.fix_pip,
            pip_package=options.pip_package,
            todo_comments=options.todo_comments,
        )
    except Exception as error:  # noqa: BLE001 - one file's internal error must not stop the others
        return FileResult(path, data, error=f"internal error: {type(error).__name__}: {error} (please report it)")
    result.records.sort(key=Record.sort_key)
    return result


def migrate_path(path: str, options: Options) -> FileResult:
    """Read the file ``path`` and migrate it."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        return FileResult(path, b"", error=f"cannot read: {error.strerror or error}")
    return migrate_bytes(path, data, options)


def worker_count(jobs: int) -> int:
    """``-j`` as a number of processes: 0 means one per CPU."""
    return jobs if jobs > 0 else (os.cpu_count() or 1)


def migrate_paths(paths: Sequence[str], options: Options, jobs: int = 1) -> Iterator[FileResult]:
    """Migrate every path, yielding results in the order of ``paths``."""
    workers = min(worker_count(jobs), len(paths))
    if workers <= 1:
        for path in paths:
            yield migrate_path(path, options)
        return
    # Small chunks keep the workers busy to the end; not too small, each one is a round trip.
    chunk = max(1, min(16, len(paths) // (workers * 8)))
    import concurrent.futures  # (only with -j: start-up counts for a command run on one notebook)

    with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(migrate_path, paths, [options] * len(paths), chunksize=chunk)


def migrate_standard_input(data: bytes, name: Optional[str], options: Options) -> FileResult:
    """Migrate code read from standard input, reported as ``name`` (``-`` when none was given).

    The format comes from the name (``.ipynb`` is a notebook; a ``.py`` is a script or, by its first line, a
    Databricks notebook source), and without a telling name from the content (JSON with a list of cells is a
    notebook).
    """
    shown = name or "-"
    engine_path = shown + ".ipynb" if is_notebook(shown, data) and not shown.endswith(".ipynb") else shown
    result = migrate_bytes(engine_path, data, options)
    if engine_path != shown:
        result.path = shown
        result.records = [dataclasses.replace(record, path=shown) for record in result.records]
    return result
