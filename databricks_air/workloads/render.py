"""How the workload commands show things: upstream's JSON envelope and fields, and text for people."""

from __future__ import annotations

import datetime
import json
import shutil
from typing import Any, Dict, List, Optional, Sequence

from databricks.air.workloads import attempt_tracking, environments, logs, statuses
from databricks.air.workloads.errors import WorkloadError
from databricks.air.workloads.runs import Run

ENVELOPE_VERSION = 1


def iso(seconds: Optional[float]) -> Optional[str]:
    """``2026-08-21T10:15:01.123+00:00``."""
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="milliseconds")


def local_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: Optional[float]) -> str:
    """``4.2s``, ``3m 05s``, ``2h 01m``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def envelope(data: Dict[str, Any], now: float) -> str:
    return json.dumps({"v": ENVELOPE_VERSION, "ts": iso(now), "data": data})


def error_envelope(error: WorkloadError, now: float) -> str:
    return json.dumps(
        {
            "v": ENVELOPE_VERSION,
            "ts": iso(now),
            "error": {"code": error.code, "kind": error.kind, "message": str(error), "retryable": error.retryable},
        }
    )


def event(item: Dict[str, Any], now: float) -> str:
    """One line of JSONL (``--watch -o json``, ``logs -o json``)."""
    return json.dumps({**item, "ts": item.get("ts") or iso(now)})


# --- runs as data (JSON) --------------------------------------------------------------------------------------------


def mlflow_fields(run: Run) -> Dict[str, Any]:
    latest = run.state.latest
    run_id = latest.mlflow_run_id if latest else None
    experiment = latest.mlflow_experiment_id if latest else None
    return {
        "mlflow_run_id": run_id,
        "mlflow_experiment_id": experiment,
        "mlflow_tracking_uri": run.state.tracking_uri,
        "mlflow_url": attempt_tracking.run_url(run.state.tracking_uri, experiment, run_id),
    }


def dashboard_url(run: Run) -> Optional[str]:
    """Where the run shows on its cluster's dashboard (the Ray job's page); ``None`` on this machine."""
    return run.state.owner.get("dashboard_url")


def run_data(run: Run) -> Dict[str, Any]:
    """``get -o json``'s ``data``: upstream's fields, then ours."""
    spec, state = run.spec, run.state
    return {
        "run_id": run.run_id,
        "status": state.status,
        "started_at": iso(state.started_at),
        "duration_seconds": round(state.duration, 3) if state.duration is not None else None,
        "attempt_number": state.attempt_number,
        "experiment_name": spec.experiment_name,
        "dashboard_url": dashboard_url(run),
        **mlflow_fields(run),
        "run_name": spec.run_name,
        "submitted_at": iso(state.submitted_at),
        "ended_at": iso(state.ended_at),
        "message": state.message,
        "user": spec.user,
        "backend": spec.backend,
        "accelerator_type": spec.accelerator_type,
        "num_accelerators": spec.num_accelerators,
        "max_retries": spec.max_retries,
        "timeout_minutes": spec.timeout_minutes,
        "run_dir": run.folder.path,
        "attempts": [
            {
                "attempt_number": attempt.number,
                "status": attempt.status,
                "started_at": iso(attempt.started_at),
                "ended_at": iso(attempt.ended_at),
                "duration_seconds": round(attempt.duration, 3),
                "exit_code": attempt.exit_code,
                "reason": attempt.reason,
                "mlflow_run_id": attempt.mlflow_run_id,
            }
            for attempt in state.attempt_list
        ],
        "alerts": [dict(alert) for alert in state.alerts],
    }


def list_item(run: Run) -> Dict[str, Any]:
    """``list -o json``'s ``runs[]`` items: upstream's fields, then ours."""
    spec, state = run.spec, run.state
    return {
        "run_id": run.run_id,
        "run_name": spec.run_name,
        "user": spec.user,
        "status": state.status,
        "started_at": iso(state.started_at or state.submitted_at),
        "is_sweep": False,
        "experiment_name": spec.experiment_name,
        "duration_seconds": round(state.duration, 3) if state.duration is not None else None,
        "attempt_number": state.attempt_number,
        "accelerators": spec.accelerators,
        "mlflow_run_id": mlflow_fields(run)["mlflow_run_id"],
        **({"damage": run.damage.problem, "damaged_file": run.damage.path} if run.damage else {}),
    }


def log_event(item: logs.LogEvent) -> Dict[str, Any]:
    """A log event as upstream's JSONL record (``type``, ``ts``, ``node``, ``line``) with our additions."""
    if item.type == "ALERT" and item.alert is not None:
        pattern = item.alert.pattern
        return {
            "type": "ALERT",
            "ts": iso(item.ts),
            "node": item.node,
            "attempt": item.attempt,
            "line": item.line,
            "line_number": item.line_number,
            "pattern": pattern.id,
            "title": pattern.title,
            "severity": pattern.severity,
            "consequence": pattern.consequence,
            "hint": item.alert.hint,
        }
    if item.type == "ERROR":
        return {"type": "ERROR", "ts": iso(item.ts), "node": item.node, "line": item.message}
    if item.type == "STATUS":
        return {
            "type": "STATUS",
            "ts": iso(item.ts),
            "status": item.status,
            "previous_status": item.previous_status,
            "message": item.message,
        }
    return {
        "type": "LOG",
        "ts": iso(item.ts),
        "node": item.node,
        "attempt": item.attempt,
        "line": item.line,
        "line_number": item.line_number,
    }


# --- text -----------------------------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(header)] + [len(row[i]) for row in rows]) for i, header in enumerate(headers)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines)


def box(title: str, lines: Sequence[str]) -> str:
    """A titled box around lines, as wide as the longest (up to the terminal's width)."""
    limit = max(40, shutil.get_terminal_size((120, 24)).columns - 4)
    shown = [line if len(line) <= limit else line[: limit - 1] + "…" for line in lines] or [""]
    width = max(len(title) + 2, *(len(line) for line in shown))
    top = f"╭─ {title} " + "─" * (width - len(title) - 1) + "╮"
    body = [f"│ {line.ljust(width)} │" for line in shown]
    return "\n".join([top, *body, "╰" + "─" * (width + 2) + "╯"])


def mlflow_line(run: Run) -> Optional[str]:
    latest = run.state.latest
    if latest is None or latest.mlflow_run_id is None:
        return None
    return attempt_tracking.run_link(
        run.state.tracking_uri, latest.mlflow_experiment_id, latest.mlflow_run_id, run.spec.run_name
    )


def run_text(run: Run, configuration: str) -> str:
    """``get``: the configuration as run, the run's facts, its attempts and alerts, the MLflow run."""
    spec, state = run.spec, run.state
    latest = state.latest
    facts = [
        ("Run ID", str(run.run_id)),
        ("Status", state.status + (f" ({state.message})" if state.message else "")),
        ("Submitted", local_time(state.submitted_at)),
        ("Retries", str(state.attempt_number)),
        ("Max Retries", str(spec.max_retries)),
        ("Duration", duration(state.duration)),
        ("Timeout", f"{spec.timeout_minutes} min" if spec.timeout_minutes else "none"),
        ("Experiment", spec.experiment_name),
        ("MLflow Run", latest.mlflow_run_id if latest and latest.mlflow_run_id else "-"),
        ("User", spec.user),
        ("Accelerators", spec.accelerators),
        ("Environment", environments.describe(spec.dependencies)),
        ("Backend", spec.backend + (f" ({spec.node_plan.num_nodes} nodes)" if spec.node_plan.num_nodes > 1 else "")),
        *([("Dashboard", dashboard_url(run) or "")] if dashboard_url(run) else []),
        ("Run folder", run.folder.path),
    ]
    width = max(len(name) for name, _ in facts)
    parts = [
        box("Configuration", configuration.rstrip("\n").splitlines()),
        box("Metadata", [f"{name.ljust(width)}  {value}" for name, value in facts]),
    ]
    attempts = state.attempt_list
    if attempts:
        rows = [
            [
                str(a.number),
                a.status,
                local_time(a.started_at),
                duration(a.duration),
                "-" if a.exit_code is None else str(a.exit_code),
                a.reason or "",
            ]
            for a in attempts
        ]
        parts.append("Attempts\n" + table(["Attempt", "Status", "Started", "Duration", "Exit", "Reason"], rows))
    alerts = state.alert_list()
    if alerts:
        parts.append("Alerts (likely causes first)\n" + alert_lines(alerts))
    link = mlflow_line(run)
    if link:
        parts.append(link)
    return "\n\n".join(parts)


def alert_lines(alerts: List[Any]) -> str:
    ordered = sorted(
        alerts, key=lambda a: (a.consequence, {"fatal": 0, "error": 1}.get(a.severity, 2), a.attempt, a.line_number)
    )
    lines = []
    for alert in ordered:
        times = f" (x{alert.count})" if alert.count > 1 else ""
        lines.append(
            f"  attempt {alert.attempt}, node {alert.node}, line {alert.line_number}{times}: {alert.title}"
            f"{' (a consequence)' if alert.consequence else ''}\n    {alert.line}\n    hint: {alert.hint}"
        )
    return "\n".join(lines)


def list_text(runs: Sequence[Run]) -> str:
    if not runs:
        return "No runs. (air list shows active runs; add --all-status for ended ones.)"
    rows = [
        [
            str(run.run_id),
            run.spec.experiment_name,
            run.state.status,
            local_time(run.state.started_at or run.state.submitted_at),
            duration(run.state.duration),
            (mlflow_fields(run)["mlflow_run_id"] or "-")[:12],
            run.spec.user,
            run.spec.accelerators,
        ]
        for run in runs
    ]
    text = table(["Run ID", "Experiment", "Status", "Started", "Duration", "MLflow", "User", "Accelerators"], rows)
    damaged = [f"run {run.run_id} is damaged: {run.damage.problem} ({run.damage.path})" for run in runs if run.damage]
    return "\n".join([text, "", *damaged]) if damaged else text


def status_line(run_id: int, status: str, message: Optional[str]) -> str:
    return f"run {run_id} {status}" + (f": {message}" if message else "")


def is_terminal(status: Optional[str]) -> bool:
    return status is not None and statuses.is_terminal(status)
