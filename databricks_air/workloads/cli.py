"""``air``: run a workload file on this machine, and follow it: ``run``, ``get``, ``list``, ``logs``, ``cancel``.

The commands and flags are the Databricks CLI's AI Runtime ones (``databricks air ...``); ``-o text|json`` goes
before or after the command. Exit status: 0 on success, 2 for a bad workload file or bad arguments, 1 otherwise;
``run --watch`` and ``logs`` exit 1 unless the run ended ``SUCCESS``. This module parses and prints; the work is in
:mod:`.runs` and :mod:`.logs`.
"""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from databricks.air.version import __version__
from databricks.air.workloads import logs, paths, registry, render, runs, schema, secret_store, statuses
from databricks.air.workloads.errors import InvalidArguments, NoSpaceLeft, WorkloadError

OUTPUTS = ("text", "json")


class _Parser(argparse.ArgumentParser):
    """Argument errors become :class:`InvalidArguments` (exit 2, and a JSON error under ``-o json``)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArguments(f"{self.prog}: {message}")


def _globals(parser: argparse.ArgumentParser, top: bool) -> None:
    default: Any = "text" if top else argparse.SUPPRESS  # a subcommand's copy must not reset the top one's
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=default, help="text (default) or json")
    parser.add_argument(
        "-p",
        "--profile",
        default=None if top else argparse.SUPPRESS,
        help="a Databricks profile (accepted for compatibility; unused on this machine)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="show tracebacks of internal errors",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="air",
        description="Run AI Runtime workload files (the `databricks air` commands) on this machine.",
        epilog="Workload files: air run -h config[.FIELD] describes their fields.",
    )
    parser.add_argument("--version", action="version", version=f"air (databricks-air-oss) {__version__}")
    _globals(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = commands.add_parser(
        "run",
        help="submit a workload file",
        description="Validate a workload file and run it; "
        "returns once the run is submitted (or follows it with --watch).",
    )
    run.add_argument("-f", "--file", required=True, help="the workload YAML")
    run.add_argument(
        "--watch", action="store_true", help="stream node 0's output until the run ends; exit status follows the run"
    )
    run.add_argument("--dry-run", action="store_true", help="only validate the file")
    run.add_argument(
        "--override",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="set a field (a dotted path; the value is YAML), repeatable",
    )
    run.add_argument(
        "--idempotency-key",
        default=None,
        help="a second run with the same key returns the first (beats the file's idempotency_token)",
    )
    run.add_argument(
        "--no-cache", action="store_true", help="accepted for compatibility: snapshots are always taken afresh here"
    )
    run.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray"),
        help="where the run goes: local (this machine, the default) or ray (a Ray cluster)",
    )
    run.add_argument(
        "--address",
        default=None,
        help="--backend ray: the cluster's dashboard (http://HEAD:8265) or "
        "its address (HEAD:6379, ray://HEAD:10001); default: RAY_ADDRESS",
    )
    run.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="--backend ray, CPU workloads: how many nodes (a divisor of compute.num_accelerators; default 1)",
    )
    run.add_argument(
        "--wait-for-nodes",
        action="store_true",
        help="--backend ray: do not refuse a workload that "
        "the cluster's nodes cannot hold now (an autoscaling cluster may add nodes); the run waits",
    )
    _globals(run, top=False)

    get = commands.add_parser("get", help="show a run", description="Show a run's configuration and facts.")
    get.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    _globals(get, top=False)

    listing = commands.add_parser(
        "list", help="list runs", description="List runs, newest first (active ones unless --all-status)."
    )
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    listing.add_argument("--all-status", action="store_true", help="ended runs too")
    listing.add_argument("--all-users", action="store_true", help="other users' runs too (in a shared registry)")
    listing.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="user, experiment (a glob), accelerator_type (a substring), num_accelerators; repeatable",
    )
    _globals(listing, top=False)

    log = commands.add_parser(
        "logs",
        help="show or follow a run's output",
        description="Show a node's output of the latest attempt (or --retry N); follows an active run until it ends.",
    )
    log.add_argument("run_id", type=_run_id, metavar="RUN_ID")
    log.add_argument("--node", type=int, default=None, help="the node (default 0; --download-to: every node)")
    log.add_argument("--tail", type=int, default=None, help="the last N lines (default 10000; 0: none)")
    log.add_argument("--lines", type=int, default=None, help="older name of --tail")
    log.add_argument("--minutes", type=float, default=None, help="only the lines of the last N minutes")
    log.add_argument("--retry", type=int, default=-1, help="the attempt (0 is the first; -1, the default: latest)")
    log.add_argument("--download-to", default=None, metavar="DIR", help="write DIR/logs/node_<n>.log instead")
    _globals(log, top=False)

    stop = commands.add_parser(
        "cancel",
        help="cancel runs",
        description="Stop runs: every process of their command gets SIGTERM, then SIGKILL after a grace period.",
    )
    stop.add_argument("run_ids", type=_run_id, nargs="*", metavar="RUN_ID")
    stop.add_argument("--all", action="store_true", help="every active run of yours")
    stop.add_argument("-y", "--yes", action="store_true", help="do not ask before --all")
    _globals(stop, top=False)

    secrets = commands.add_parser(
        "secrets",
        help="the local secret store",
        description="Secrets that workloads name as scope/key, stored under ~/.air/secrets with mode 0600.",
    )
    secret_commands = secrets.add_subparsers(dest="secrets_command", metavar="ACTION", parser_class=_Parser)
    put = secret_commands.add_parser("put", help="store a secret (value from stdin, or typed without echo)")
    put.add_argument("ref", metavar="SCOPE/KEY")
    put.add_argument("--value", default=None, help="the value (visible in your shell's history: prefer stdin)")
    secret_commands.add_parser("list", help="the stored secrets' names (never values)")
    delete = secret_commands.add_parser("delete", help="remove a stored secret")
    delete.add_argument("ref", metavar="SCOPE/KEY")
    for sub in (secrets, put, delete, secret_commands.choices["list"]):
        _globals(sub, top=False)
    return parser


def _run_id(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"a run id is a positive integer, not {text!r}")
    return int(text)


class Output:
    """Where results go: stdout for data, stderr for notes."""

    def __init__(self, mode: str) -> None:
        self.json = mode == "json"

    def data(self, data: Dict[str, Any], text: str) -> None:
        print(render.envelope(data, time.time()) if self.json else text, flush=True)

    def event(self, item: Dict[str, Any]) -> None:
        print(render.event(item, time.time()), flush=True)

    def note(self, text: str) -> None:
        print(f"air: {text}", file=sys.stderr, flush=True)


# --- the commands ---------------------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    submission = runs.submit(
        args.file,
        args.override,
        args.idempotency_key,
        backend=args.backend,
        dry_run=args.dry_run,
        backend_options={"address": args.address, "nodes": args.nodes, "wait_for_nodes": args.wait_for_nodes},
    )
    for note in submission.notes:
        out.note(note)
    if submission.run is None:
        out.data(
            {"status": statuses.DRY_RUN_OK, "dry_run": True},
            f"{args.file}: valid ({statuses.DRY_RUN_OK}); nothing was started.",
        )
        return 0
    run = submission.run
    if args.watch:
        return _watch(run, out)
    if submission.created:
        run = _wait_for_mlflow_run(run)
    text = [f"Experiment: {run.spec.experiment_name}", f"Run ID: {run.run_id} ({run.state.status})"]
    dashboard = render.dashboard_url(run)
    if dashboard:
        text.append(f"Ray job: {dashboard}")
    link = render.mlflow_line(run)
    if link:
        text.append(link)
    text.append(f"Follow it: air logs {run.run_id}   (or air get {run.run_id}; submit with --watch to follow at once)")
    out.data(
        {
            "status": run.state.status,
            "run_id": run.run_id,
            "dashboard_url": dashboard,
            "created": submission.created,
            **render.mlflow_fields(run),
        },
        "\n".join(text),
    )
    return 0


def _wait_for_mlflow_run(run: runs.Run, seconds: float = 20.0) -> runs.Run:
    """Wait until the first attempt has its MLflow run (or the run got past that point), to show its link."""
    from databricks.air.workloads import attempt_tracking

    if not attempt_tracking.enabled():
        return run
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if run.state.attempts or run.state.terminal or run.state.status == statuses.WAITING_FOR_RETRY:
            return run
        time.sleep(0.1)
        run = runs.load_run(run.folder)
    return run


def _watch(run: runs.Run, out: Output) -> int:
    if out.json:
        out.event({"type": "SUBMITTED", "run_id": run.run_id, "dashboard_url": render.dashboard_url(run)})
    else:
        out.note(
            f"run {run.run_id} submitted ({run.spec.experiment_name}); following node 0 (Ctrl-C stops "
            f"following, not the run: air cancel {run.run_id})"
        )
    shown_link = None
    stream = sys.stdout.buffer
    try:
        for item in logs.follow(run, 0, tail=None, whole_lines=out.json):
            if item.type == "STATUS":
                if out.json and item.previous_status is not None:
                    out.event(render.log_event(item))
                elif not out.json and item.previous_status is not None and not render.is_terminal(item.status):
                    out.note(render.status_line(run.run_id, item.status or "", item.message))
                current = runs.load_run(run.folder)
                link = render.mlflow_line(current)
                if link and link != shown_link and not out.json:
                    out.note(link)
                    shown_link = link
            elif out.json:
                out.event(render.log_event(item))
            else:
                stream.write(item.data)
                stream.flush()
    except KeyboardInterrupt:
        out.note(f"stopped following; run {run.run_id} goes on (air logs {run.run_id} to follow it again)")
        return 130
    final = runs.load_run(run.folder)
    if out.json:
        out.data({"status": final.state.status or "UNKNOWN", "run_id": run.run_id, "message": final.state.message}, "")
    else:
        out.note(
            f"run {run.run_id} ended {final.state.status} after {render.duration(final.state.duration)}"
            + (f": {final.state.message}" if final.state.message else "")
        )
        last = final.state.attempt_number
        alerts = [alert for alert in final.state.alert_list() if alert.attempt == last]
        if alerts:
            out.note(
                f"likely causes in the output of attempt {last} (air get {run.run_id} lists every attempt's):\n"
                + render.alert_lines(alerts)
            )
    return 0 if final.state.status == statuses.SUCCESS else 1


def cmd_get(args: argparse.Namespace, out: Output) -> int:
    run = runs.get(args.run_id)
    try:
        with open(run.folder.file("workload.yaml"), encoding="utf-8") as stream:
            configuration = stream.read()
    except OSError:
        configuration = "(not recorded)"
    data = render.run_data(run)
    if out.json:
        import yaml

        from databricks.air.workloads import yaml_values

        try:
            data["configuration"] = yaml_values.plain(yaml_values.load(configuration)) if configuration else None
        except yaml.YAMLError as error:  # recorded by an older version, which took what is refused now (anchors...)
            out.note(
                f"run {run.run_id}'s recorded configuration cannot be read back ({error.__class__.__name__}); "
                "`air get` without -o json shows it as text"
            )
            data["configuration"] = None
    out.data(data, render.run_text(run, configuration))
    return 0


def cmd_list(args: argparse.Namespace, out: Output) -> int:
    found = runs.list_runs(args.limit, args.all_status, args.all_users, runs.parse_filters(args.filter))
    out.data({"runs": [render.list_item(run) for run in found]}, render.list_text(found))
    return 0


def cmd_logs(args: argparse.Namespace, out: Output) -> int:
    if args.tail is not None and args.lines is not None:
        raise InvalidArguments("give --tail or --lines (its older name), not both")
    if args.lines is not None:
        out.note("--lines is the older name of --tail")
    tail = args.tail if args.tail is not None else args.lines
    if tail is not None and tail < 0:
        raise InvalidArguments(f"--tail must be 0 or more, not {tail}")
    if args.minutes is not None and tail is not None:
        raise InvalidArguments("--minutes cannot be combined with --tail/--lines")
    if args.minutes is not None and args.minutes <= 0:
        raise InvalidArguments(f"--minutes must be positive, not {args.minutes:g}")
    if args.download_to is not None and (tail is not None or args.minutes is not None):
        raise InvalidArguments("--download-to writes whole logs: it cannot be combined with --tail or --minutes")
    run = runs.get(args.run_id)
    node = 0 if args.node is None else args.node
    logs.check_node(run, node)
    attempt = logs.choose_attempt(run, args.retry)
    if args.download_to is not None:
        nodes = [node] if args.node is not None else list(range(run.spec.node_plan.num_nodes))
        written = logs.download(run, attempt, nodes, args.download_to)
        out.data(
            {"run_id": run.run_id, "attempt_number": attempt, "files": written},
            "\n".join(f"wrote {path}" for path in written),
        )
        return 0 if run.state.status == statuses.SUCCESS else 1
    tail = logs.DEFAULT_TAIL if tail is None and args.minutes is None else tail
    pinned = attempt if args.retry != -1 else None
    if run.state.terminal or (pinned is not None and pinned < len(run.state.attempts) - 1):
        items = logs.read(run, attempt, node, tail=tail, minutes=args.minutes)
    else:
        items = logs.follow(run, node, attempt=pinned, tail=tail, minutes=args.minutes, whole_lines=out.json)
    stream = sys.stdout.buffer
    try:
        for item in items:
            if item.type == "STATUS":
                continue
            if out.json:
                out.event(render.log_event(item))
            elif item.type == "ERROR":
                out.note(item.message or "")
            elif item.type == "LOG":
                stream.write(item.data)
                stream.flush()
    except KeyboardInterrupt:
        return 130
    final = runs.load_run(run.folder)
    return 0 if final.state.status == statuses.SUCCESS else 1


def cmd_cancel(args: argparse.Namespace, out: Output) -> int:
    if bool(args.run_ids) == bool(args.all):
        raise InvalidArguments("give run ids, or --all, not both and not neither")
    ids = list(args.run_ids)
    if args.all:
        active = runs.active_runs()
        ids = [run.run_id for run in active]
        if not ids:
            out.data({"cancelled": [], "all": True}, "No active runs to cancel.")
            return 0
        if not args.yes:
            preview = render.list_text(active)
            if not sys.stdin.isatty():
                raise InvalidArguments(
                    f"cancel --all would stop {len(ids)} run(s); add -y to confirm without a terminal:\n{preview}"
                )
            print(preview, file=sys.stderr)
            answer = input(f"Cancel these {len(ids)} run(s)? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                out.note("nothing canceled")
                return 1
    result = runs.cancel(ids)
    data: Dict[str, Any] = {"cancelled": result.canceled}
    if args.all:
        data["all"] = True
    if result.failed:
        data["failed"] = [{"run_id": run_id, "error": error} for run_id, error in result.failed]
    lines = []
    for run in result.runs:
        if run.run_id in result.canceled:
            state = "canceled" if run.state.status == statuses.CANCELED else "cancel requested, still stopping"
            lines.append(f"Run {run.run_id}: {state}")
    lines += [f"Run {run_id}: not canceled: {error}" for run_id, error in result.failed]
    lines.append(
        f"{len(result.canceled)} run(s) canceled" + (f", {len(result.failed)} failed" if result.failed else "")
    )
    out.data(data, "\n".join(lines))
    return 1 if result.failed else 0


def cmd_secrets(args: argparse.Namespace, out: Output) -> int:
    action = getattr(args, "secrets_command", None)
    if action == "put":
        ref = secret_store.parse_ref(args.ref)
        value = args.value
        try:  # what the store would refuse to hand to a workload is refused now
            if value is None and sys.stdin.isatty():
                value = getpass.getpass(f"value of {ref}: ")
            elif value is None:
                data = sys.stdin.buffer.read(secret_store.MAX_VALUE_BYTES + 2)
                value = secret_store.decode(ref, data[:-1] if data.endswith(b"\n") else data, "the value on stdin")
            else:
                value = secret_store.decode(ref, value.encode("utf-8", "surrogateescape"), "the value of --value")
        except InvalidArguments:
            raise
        except WorkloadError as error:
            raise InvalidArguments(str(error)) from None
        path = secret_store.put(ref, value)
        out.data({"secret": str(ref), "path": path}, f"stored {ref} in {path}")
        return 0
    if action == "delete":
        ref = secret_store.parse_ref(args.ref)
        removed = secret_store.delete(ref)
        out.data({"secret": str(ref), "deleted": removed}, f"deleted {ref}" if removed else f"{ref} was not stored")
        return 0 if removed else 1
    if action == "list":
        found = secret_store.stored()
        out.data(
            {"secrets": [{"secret": str(ref), "path": path} for ref, path in found]},
            "\n".join(f"{ref}  {path}" for ref, path in found) or "No stored secrets.",
        )
        return 0
    raise InvalidArguments("air secrets needs an action: put, list or delete")


COMMANDS: Dict[str, Callable[[argparse.Namespace, Output], int]] = {
    "run": cmd_run,
    "get": cmd_get,
    "list": cmd_list,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "secrets": cmd_secrets,
}


def _output_mode(argv: Sequence[str]) -> str:
    """``-o`` as written anywhere, for errors found before or while parsing."""
    for index, arg in enumerate(argv):
        if arg in ("-o", "--output") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--output="):
            return arg.split("=", 1)[1]
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            return arg[2:]
    return "text"


def _config_help(argv: Sequence[str]) -> Optional[str]:
    """``air run -h config[.PATH]``: the schema's help, or ``None`` when not asked for."""
    if "run" not in argv:
        return None
    for index, arg in enumerate(argv):
        if arg in ("-h", "--help") and index + 1 < len(argv) and argv[index + 1].split(".")[0] == "config":
            return schema.help_text([part for part in argv[index + 1].split(".")[1:] if part])
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Run one ``air`` command; return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Output("json" if _output_mode(argv) == "json" else "text")
    debug = "--debug" in argv
    try:
        config_help = _config_help(argv)
        if config_help is not None:
            print(config_help)
            return 0
        parser = build_parser()
        args = parser.parse_args(argv)
        out = Output(args.output)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        return COMMANDS[args.command](args, out)
    except WorkloadError as error:
        if out.json:
            print(render.error_envelope(error, time.time()), flush=True)
        else:
            print(f"Error: {error}", file=sys.stderr, flush=True)
        return error.exit_status
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # an internal error is reported, with its traceback under --debug
        if debug:
            raise
        if registry.disk_full(error):  # not ours to fix: say where, in one line
            where = f" ({error.filename})" if getattr(error, "filename", None) else ""
            full = NoSpaceLeft(
                f"no space left on device{where}: free some space on the file system of "
                f"{paths.air_home()} and try again"
            )
            print(
                render.error_envelope(full, time.time()) if out.json else f"Error: {full}",
                file=sys.stdout if out.json else sys.stderr,
                flush=True,
            )
            return full.exit_status
        wrapped = WorkloadError(
            f"internal error: {type(error).__name__}: {error} (rerun with --debug for the traceback)"
        )
        if out.json:
            print(render.error_envelope(wrapped, time.time()), flush=True)
        else:
            print(f"Error: {wrapped}", file=sys.stderr, flush=True)
        return 1


def entry_point() -> None:
    """The ``air`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
