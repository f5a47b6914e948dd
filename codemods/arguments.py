"""The command line of ``air-migrate``: its options, their help, and the combinations it refuses (exit code 2)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence

from air_migrate import colors, diffing, report
from air_migrate.settings import requirement_problem

STDIN = "-"
DESCRIPTION = """\
Rewrite Python scripts, Databricks notebook sources and Jupyter notebooks from serverless_gpu to databricks.air.

Modes (one at a time): write in place (the default); --diff prints a unified diff and writes nothing; --check says
which files would change and writes nothing; --out-dir DIR writes the results as copies under DIR. A path "-" reads
standard input and writes the migrated text to standard output (with --diff, the diff; with --check, nothing).
"""
EPILOG = """\
report:
  One line per change and per item that needs a person:
    path[:cell N]:line:col: AMxxx <severity> <message>
  All numbers are 1-based. "line" is the line in the file for plain scripts and for Databricks notebook sources
  (what editors show; "cell N" then names the notebook cell, counting every cell), and the line within the cell for
  Jupyter notebooks (.ipynb). Severities: info (a note, nothing to do: a mention of serverless_gpu in prose, a
  suppression comment that suppresses nothing; never fails --check), change (rewritten), review (rewritten, a
  person should check it), manual (not rewritten, needs a person; the rest of the file is still migrated),
  blocking (not rewritten, and the file is left unchanged unless --partial, since half a migration breaks on both
  runtimes), error (the file could not be processed: a plain script that does not parse, with the parser's
  message; it is left as it is, see exit code 3).
  Report lines go to standard output, except with --diff or "-" (then to standard error, so that standard output
  holds only the diff or the code). A closing summary always goes to standard error.
  --report-format json writes one object: {"version": 1, "summary": {"mode", "scanned", "relevant", "changed",
  "changes", "needs_person", "blocked", "failed", "notes"}, "records": [{"file", "cell", "line", "col", "end_line",
  "end_col", "code", "severity", "message", "before", "after"}], "errors": [{"file", "message"}]}, records sorted
  by file then position; cell, end_line, end_col, before and after may be null.

diffs:
  --diff gives patches for "git apply" (a/PATH and b/PATH headers, relative to the current directory). For
  .ipynb files it shows each changed cell under a "PATH:cell N" header instead, which is not a patch;
  --diff=json gives the diff of the notebook's JSON, which is.

--out-dir:
  Every file scanned is written under DIR, migrated or as it was (a file left unchanged or one that failed is
  copied as it is; files that are not *.py or *.ipynb are not copied), keeping its path below the deepest
  directory that holds every input. DIR must not exist, unless --force (then files of the same name in it are
  replaced). The inputs are never touched.

suppressions:
  "# air-migrate: ignore[AM101,AM109]" (or a bare "# air-migrate: ignore", or "# noqa: AM101") on a line hides
  its items of those codes, every severity but change and error (a change is always made); a line of its own
  "# air-migrate: skip-file" leaves the whole file as it is. A suppression that suppresses nothing is reported
  (AM904, info).

configuration:
  The [tool.air-migrate] table of pyproject.toml, looked for in the current directory and then each one above it
  (a pyproject.toml without the table is passed over; the first with it is the only one read), sets defaults for
  select and ignore (lists of rule codes), exclude (a list of globs), fix-pip and todo-comments (true/false) and
  pip-package (a string). An option on the command line replaces the file's value (--no-fix-pip and
  --no-todo-comments turn off what the file turns on); --isolated reads no file; --show-settings prints what is in
  force and where each value came from. A bad table (unknown key, wrong type, unknown code) exits 2.

exit codes:
  0  nothing to change and nothing failed (in write mode and with --out-dir, also after changing files)
  1  --check/--diff: a file would change, or an item needs a person; in write mode and with --out-dir only with
     --exit-nonzero-on-change (files changed, or an item needs a person)
  2  usage error: an unknown option or rule code, a bad combination of options, a bad [tool.air-migrate] table
  3  at least one file could not be processed (unreadable, not UTF-8, broken JSON, a plain script that does not
     parse, an internal error) or written; every other file was still processed
  130 interrupted (Ctrl-C): files already written are complete, the others unchanged
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``air-migrate`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="air-migrate",
        description=DESCRIPTION,
        epilog=EPILOG,
        allow_abbrev=False,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help='files and directories (directories are searched for *.py and *.ipynb); "-" for stdin',
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--diff",
        nargs="?",
        const=diffing.CELLS,
        choices=diffing.FORMATS,
        metavar="=json",
        help="print a unified diff and write nothing; --diff=json diffs notebooks as JSON",
    )
    mode.add_argument("--check", action="store_true", help="print which files would change and write nothing")
    mode.add_argument("--out-dir", metavar="DIR", help="write migrated copies under DIR (see below)")
    parser.add_argument("--force", action="store_true", help="with --out-dir: write into an existing DIR")
    parser.add_argument(
        "--stdin-filename",
        metavar="NAME",
        help='with "-": the name to report and to pick the format by (.ipynb, or a .py that may '
        "be a Databricks notebook source); without it the format is guessed from the content",
    )
    parser.add_argument("--select", metavar="CODES", help="comma-separated rule codes to run (default: all)")
    parser.add_argument("--ignore", metavar="CODES", help="comma-separated rule codes not to run")
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="skip paths matching GLOB, or a directory of that name (repeatable)",
    )
    parser.add_argument(
        "--partial", action="store_true", help="also write files that have blocking items (what can be converted is)"
    )
    parser.add_argument(
        "--fix-pip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rewrite %%pip/!pip installs of serverless_gpu (to databricks-sdk-air in Databricks "
        "notebook sources, to databricks-air-oss elsewhere), keeping the other packages",
    )
    parser.add_argument("--pip-package", metavar="NAME", help="with --fix-pip: the package to install instead")
    parser.add_argument(
        "--todo-comments",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="insert a '# TODO(air-migrate AMxxx): ...' comment above each item that needs a person "
        "(a write always puts one above a statement it changes that holds one)",
    )
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="read no configuration file ([tool.air-migrate] in pyproject.toml, see below)",
    )
    parser.add_argument(
        "--show-settings", action="store_true", help="print the settings in force and where each came from, then exit"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="files processed in N processes (default 1; 0: one per CPU); the output is the same",
    )
    parser.add_argument("--report", metavar="FILE", help="also write the report (records, errors, summary) to FILE")
    parser.add_argument(
        "--report-format",
        choices=report.FORMATS,
        help="format of --report FILE (default text; json is described below)",
    )
    parser.add_argument(
        "--color",
        choices=colors.CHOICES,
        default="auto",
        help="colour diffs and report lines: auto (default: when the output is a terminal and "
        "NO_COLOR is unset), always, never",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one is drawn on standard error when it is a terminal and there are 20 files or more)",
    )
    parser.add_argument(
        "--exit-nonzero-on-change",
        action="store_true",
        help="exit 1 in write mode when files were changed or an item needs a person",
    )
    parser.add_argument("--list-rules", action="store_true", help="list every report code and what it means")
    return parser


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows ``--diff[=json]`` as it must be written: the value only after ``=``."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if action.dest == "diff":
            return "--diff[=json]"
        return super()._format_action_invocation(action)


def parse_arguments(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Parse and check the command line; a usage error exits with code 2 and says what to change."""
    parser = build_parser()
    args = parser.parse_args(_diff_value_only_after_equals(argv))
    problem = _problem(args)
    if problem:
        parser.error(problem)
    return args


def _problem(args: argparse.Namespace) -> Optional[str]:
    if args.list_rules or args.show_settings:
        return None
    if not args.paths:
        return "give at least one file or directory (or - for standard input)"
    if STDIN in args.paths and len(args.paths) > 1:
        return '"-" (standard input) cannot be combined with other paths'
    if args.stdin_filename is not None and args.paths != [STDIN]:
        return '--stdin-filename only applies when the path is "-"'
    if args.out_dir is not None and args.paths == [STDIN]:
        return '--out-dir writes copies of files; with "-" the migrated code goes to standard output'
    if args.force and args.out_dir is None:
        return "--force only applies with --out-dir"
    if args.pip_package is not None and requirement_problem(args.pip_package):
        return f"--pip-package {requirement_problem(args.pip_package)}"
    if args.report_format is not None and args.report is None:
        return "--report-format only applies with --report FILE"
    if args.report is not None:
        directory = os.path.dirname(os.path.abspath(args.report))
        if not os.path.isdir(directory):
            return f"--report {args.report}: the directory {directory} does not exist"
        if os.path.isdir(args.report):
            return f"--report {args.report} is a directory: name a file"
    return None


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} processes: give 1 or more, or 0 for one per CPU")
    return value


def _diff_value_only_after_equals(argv: Optional[Sequence[str]]) -> Optional[List[str]]:
    """``--diff`` takes its value only as ``--diff=json``: a bare ``--diff`` never swallows the next path."""
    if argv is None:
        argv = sys.argv[1:]
    out: List[str] = []
    for index, token in enumerate(argv):
        if token == "--":
            return out + list(argv[index:])
        out.append(f"--diff={diffing.CELLS}" if token == "--diff" else token)
    return out
