"""The ``air-migrate`` command line: find files, migrate them, report, and write (or diff, or check).

Exit codes: 0 nothing to change and nothing failed; 1 ``--check``/``--diff`` found a file that would change or an
item that needs a person (in write mode only with ``--exit-nonzero-on-change``); 2 a usage error; 3 at least one
file could not be processed (the others still were). Report lines are ``path[:cell N]:line:col: CODE message``;
every number is 1-based (for ``.ipynb`` the line is within the cell).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import os
import sys
import tempfile
from typing import Iterator, List, Optional, Sequence, Type

from air_migrate.engine import FileResult, migrate_file
from air_migrate.rules import REGISTRY
from air_migrate.rules.base import Rule

SKIPPED_DIRECTORIES = {".git", ".venv", "venv", "site-packages", "__pycache__", ".ipynb_checkpoints"}
# Codes reported by rules and the driver besides the rules' own (for --list-rules).
EXTRA_CODES = {
    "AM104": "reported: an H100 type whose count is not a literal (the shape depends on it)",
    "AM105": "reported: a literal count with no accelerator type for its model (e.g. 4 x H100)",
    "AM106": "reported: a GPU type string that is not an old model name as written",
    "AM107": "reported: a computed GPU type string",
    "AM108": "reported: GPUType.X (its rewrite to AcceleratorType is not automated yet)",
    "AM110": "reported: a %pip install of serverless_gpu (rewriting pip lines is not automated yet)",
    "AM901": "reported: a notebook cell skipped (a non-Python cell magic, a multi-line magic)",
    "AM902": "reported: a cell that is not valid Python (e.g. a bare `pip install` line) is skipped",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``air-migrate`` and ``python -m air_migrate``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        for code, rule in sorted(REGISTRY.items()):
            print(f"{code}  {rule.DESCRIPTION}")
        for code, description in EXTRA_CODES.items():
            print(f"{code}  {description}")
        return 0
    if not args.paths:
        parser.error("give at least one file or directory")
    try:
        rules = _select_rules(args.select, args.ignore)
    except ValueError as error:
        parser.error(str(error))
    results = [_process(path, rules, args.partial) for path in sorted(set(_discover(args.paths, args.exclude)))]
    exit_code = 0
    for result in results:
        for record in sorted(result.records, key=lambda r: (r.cell or 0, r.line, r.column, r.code)):
            print(record)
        if result.error:
            print(f"{result.path}: error: {result.error}", file=sys.stderr)
            exit_code = 3
        elif result.changed:
            if args.diff:
                sys.stdout.write(_diff(result))
            elif args.check:
                print(f"{result.path}: would change")
            else:
                _write_atomically(result.path, result.migrated)  # type: ignore[arg-type]
    _summary(results, dry=args.diff or args.check)
    needs_attention = any(r.attention for result in results for r in result.records)
    would_change = any(result.changed for result in results)
    if exit_code == 0 and (would_change or needs_attention):
        if args.diff or args.check or args.exit_nonzero_on_change:
            exit_code = 1
    return exit_code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="air-migrate",
        description="Rewrite scripts and notebooks from serverless_gpu to databricks.air. Report positions are "
        "1-based; for .ipynb the line is within the cell.",
    )
    parser.add_argument("paths", nargs="*", help="files and directories (*.py, *.ipynb)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff, write nothing")
    mode.add_argument("--check", action="store_true", help="say which files would change, write nothing")
    parser.add_argument("--select", default="", help="comma-separated rule codes to run (default: all)")
    parser.add_argument("--ignore", default="", help="comma-separated rule codes not to run")
    parser.add_argument("--exclude", action="append", default=[], help="glob of paths to skip (repeatable)")
    parser.add_argument("--partial", action="store_true", help="write files even when some uses need a person")
    parser.add_argument("--exit-nonzero-on-change", action="store_true", help="exit 1 when files were changed")
    parser.add_argument("--list-rules", action="store_true", help="list every rule and report code")
    return parser


def _select_rules(select: str, ignore: str) -> List[Type[Rule]]:
    chosen = [c.strip().upper() for c in select.split(",") if c.strip()] or sorted(REGISTRY)
    ignored = {c.strip().upper() for c in ignore.split(",") if c.strip()}
    unknown = sorted((set(chosen) | ignored) - set(REGISTRY))
    if unknown:
        raise ValueError(f"unknown rule code(s): {', '.join(unknown)} (see --list-rules)")
    return [REGISTRY[code] for code in sorted(chosen) if code not in ignored]


def _discover(paths: Sequence[str], excludes: Sequence[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isdir(path):
            for root, directories, files in os.walk(path):
                directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES)
                for name in sorted(files):
                    if name.endswith((".py", ".ipynb")):
                        candidate = os.path.join(root, name)
                        if not _excluded(candidate, excludes):
                            yield candidate
        elif not _excluded(path, excludes):
            yield path


def _excluded(path: str, excludes: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in excludes)


def _process(path: str, rules: Sequence[Type[Rule]], partial: bool) -> FileResult:
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except OSError as error:
        return FileResult(path, b"", error=f"cannot read: {error.strerror}")
    return migrate_file(path, data, rules, partial)


def _diff(result: FileResult) -> str:
    relative = os.path.relpath(result.path).replace(os.sep, "/")
    before = result.original.decode("utf-8").splitlines(keepends=True)
    after = (result.migrated or b"").decode("utf-8").splitlines(keepends=True)
    lines = list(difflib.unified_diff(before, after, f"a/{relative}", f"b/{relative}"))
    # A last line without a newline needs git's marker so that the diff applies.
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _write_atomically(path: str, data: bytes) -> None:
    """Replace the file's content in one step, keeping its mode; a symlink stays a link to the edited target."""
    target = os.path.realpath(path)
    mode = os.stat(target).st_mode & 0o7777
    directory = os.path.dirname(target) or "."
    handle, temporary = tempfile.mkstemp(prefix=".air-migrate-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _summary(results: Sequence[FileResult], dry: bool) -> None:
    relevant = sum(r.relevant for r in results)
    changed = sum(r.changed for r in results)
    changes = sum(1 for r in results for record in r.records if not record.attention)
    attention = sum(1 for r in results for record in r.records if record.attention)
    failed = sum(r.error is not None for r in results)
    verb = "would change" if dry else "changed"
    line = (
        f"air-migrate: {len(results)} file(s) scanned, {relevant} mention serverless_gpu or its keywords, "
        f"{changed} {verb} ({changes} change(s)), {attention} item(s) need a person, {failed} failed"
    )
    if relevant == 0:
        line += "; nothing to migrate was found"
    print(line, file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
