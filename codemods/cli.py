"""The ``air-migrate`` command: find files, migrate them, report, and deliver the results in the chosen mode.

This module only puts the parts together: :mod:`~air_migrate.arguments` (options and usage errors),
:mod:`~air_migrate.settings` (the options over the ``[tool.air-migrate]`` table of ``pyproject.toml``),
:mod:`~air_migrate.discovery` (which files), :mod:`~air_migrate.runner` (the engine, in parallel with ``-j``),
:mod:`~air_migrate.modes` (write, diff, check, out-dir, standard output) and :mod:`~air_migrate.report` (report
lines, the JSON report, the summary). Exit codes: 0 nothing to change and nothing failed; 1 ``--check``/``--diff``
found something to change or an item that needs a person (in write mode only with ``--exit-nonzero-on-change``);
2 a usage error; 3 a file could not be processed or written (the others still were).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Iterable, Optional, Sequence, TextIO, Tuple

from air_migrate import colors, progress, report, settings
from air_migrate.arguments import STDIN, build_parser, parse_arguments
from air_migrate.codes import documented_codes, select_rules
from air_migrate.colors import Palette
from air_migrate.discovery import discover
from air_migrate.modes import Check, CopyToTree, Diff, InPlace, Mode, ToStandardOutput
from air_migrate.results import FileResult
from air_migrate.rules import REGISTRY
from air_migrate.runner import Options, migrate_paths, migrate_standard_input
from air_migrate.writing import OutputTree

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``air-migrate`` and ``python -m air_migrate``."""
    args = parse_arguments(argv)
    if args.list_rules:
        for code, description in documented_codes():
            print(f"{code}  {description}")
        return EXIT_OK
    try:
        chosen = settings.resolve(_given(args), sorted(REGISTRY), isolated=args.isolated)
    except settings.ConfigError as error:
        print(f"air-migrate: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        rules = select_rules(",".join(chosen.select.value), ",".join(chosen.ignore.value))
    except ValueError as error:
        build_parser().error(str(error))
    if chosen.pip_package.source == settings.COMMAND_LINE and not chosen.fix_pip.value:
        build_parser().error("--pip-package only applies with --fix-pip")
    if args.show_settings:
        sys.stdout.write(settings.render(chosen, [rule.CODE for rule in rules]))
        return EXIT_OK
    options = Options(
        tuple(rules), args.partial, chosen.fix_pip.value, chosen.pip_package.value, chosen.todo_comments.value
    )
    try:
        if args.paths == [STDIN]:
            return _run_standard_input(args, options)
        return _run_files(args, options, chosen.exclude.value)
    except KeyboardInterrupt:
        print("air-migrate: interrupted; files already written are complete, the others are unchanged", file=sys.stderr)
        return EXIT_INTERRUPTED


def _given(args: argparse.Namespace) -> Dict[str, Any]:
    """The settings given on the command line (``None``: not given), as :func:`settings.resolve` takes them."""

    def codes(text: Optional[str]) -> Optional[Tuple[str, ...]]:
        return None if text is None else tuple(code.strip().upper() for code in text.split(",") if code.strip())

    return {
        "select": codes(args.select),
        "ignore": codes(args.ignore),
        "exclude": tuple(args.exclude) if args.exclude is not None else None,
        "fix_pip": args.fix_pip,
        "pip_package": args.pip_package,
        "todo_comments": args.todo_comments,
    }


def _run_files(args: argparse.Namespace, options: Options, excludes: Sequence[str]) -> int:
    tree = None
    if args.out_dir is not None:
        try:
            tree = OutputTree(args.out_dir, args.paths, args.force)
        except ValueError as error:
            build_parser().error(str(error))
    paths = discover(args.paths, excludes, prune={tree.real_directory} if tree else frozenset())
    if tree is not None:
        try:
            tree.check_targets(paths)
            tree.create()
        except ValueError as error:
            build_parser().error(str(error))
    stdout_palette = Palette(colors.wanted(args.color, sys.stdout))
    mode: Mode
    if args.diff:
        mode = Diff(sys.stdout, stdout_palette, args.diff)
    elif args.check:
        mode = Check(sys.stdout, stdout_palette)
    elif tree is not None:
        mode = CopyToTree(tree)
    else:
        mode = InPlace()
    report_stream = sys.stderr if args.diff else sys.stdout
    bar = progress.Progress(sys.stderr, len(paths), progress.wanted(sys.stderr, len(paths), args.no_progress))
    return _run(args, mode, migrate_paths(paths, options, args.jobs), report_stream, bar)


def _run_standard_input(args: argparse.Namespace, options: Options) -> int:
    result = migrate_standard_input(sys.stdin.buffer.read(), args.stdin_filename, options)
    mode: Mode
    if args.diff:
        mode = Diff(sys.stdout, Palette(colors.wanted(args.color, sys.stdout)), args.diff)
    elif args.check:
        mode = Check(sys.stderr, Palette(colors.wanted(args.color, sys.stderr)))
    else:
        mode = ToStandardOutput(sys.stdout)
    return _run(args, mode, [result], sys.stderr, progress.Progress(sys.stderr, 1, enabled=False))


def _run(
    args: argparse.Namespace,
    mode: Mode,
    results: Iterable[FileResult],
    report_stream: TextIO,
    bar: progress.Progress,
) -> int:
    """Deliver every result in order, then the summary, the report file and the exit code."""
    tally = report.Tally(mode.name, partial=args.partial)
    report_palette = Palette(colors.wanted(args.color, report_stream))
    error_palette = Palette(colors.wanted(args.color, sys.stderr))
    try:
        for result in results:
            bar.clear()
            for record in result.records:
                report_stream.write(report.record_line(record, report_palette) + "\n")
            problem = mode.deliver(result)
            if problem is not None:
                result.error = "; ".join(filter(None, (result.error, f"not written: {problem}")))
            if result.unreported_error is not None:  # (a script that does not parse has its report line)
                report_stream.flush()
                sys.stderr.write(report.error_line(result.path, result.unreported_error, error_palette) + "\n")
            tally.add(result)
            bar.advance()
    finally:
        bar.close()  # (also when interrupted: no bar is left under the message)
    sys.stdout.flush()
    print(report.summary_line(tally, mode.verb), file=sys.stderr)
    failed_report = _write_report(args, tally, mode.verb)
    if tally.failed or failed_report:
        return EXIT_FAILED
    if (tally.changed or tally.needs_person) and (mode.dry or args.exit_nonzero_on_change):
        return EXIT_FOUND
    return EXIT_OK


def _write_report(args: argparse.Namespace, tally: report.Tally, verb: str) -> bool:
    """Write ``--report FILE``; return True when it could not be written (said on standard error)."""
    if args.report is None:
        return False
    text = report.render_json(tally) if args.report_format == report.JSON else report.render_text(tally, verb)
    temporary = f"{args.report}.air-migrate-tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, args.report)
    except OSError as error:
        if os.path.exists(temporary):
            os.unlink(temporary)
        print(f"air-migrate: error: cannot write the report {args.report}: {error.strerror or error}", file=sys.stderr)
        return True
    return False


if __name__ == "__main__":
    raise SystemExit(main())
