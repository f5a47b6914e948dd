"""Turning what failed ranks left behind into the one exception the caller sees.

The report names the root-cause rank (the first to fail), shows its remote traceback and the last 50 lines of its
output, and lists every rank's fate. The exception is an instance of the root-cause rank's own class *and* of
:class:`DistributedExecutionError` where that class can be rebuilt here.
"""

from __future__ import annotations

import pickle
import signal
from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional

from databricks.air._engine import likely_causes
from databricks.air._engine.outcome import OutcomeKind, RankOutcome, RankRecord, describe_status
from databricks.air._engine.output import log_tail
from databricks.air._engine.stop_report import StopReport
from databricks.air._engine.supervision import StopReason
from databricks.air.exceptions import (
    DistributedExecutionError,
    LocalExecutionTimeoutError,
    RankExitError,
    SerializationError,
    combine_with_rank_exception,
)
from databricks.air._notices import PREFIX


def rank_exception(outcome: RankOutcome, world_size: int) -> BaseException:
    """The exception that stands for one failed rank."""
    record = outcome.record
    kind = outcome.kind
    where = f"rank {outcome.rank} of {world_size}"
    if kind is OutcomeKind.DIED:
        if outcome.status is not None and outcome.status < 0:
            message = f"{where} was {describe_status(outcome.status)}"
            if outcome.status == -signal.SIGKILL:
                message += (
                    " (SIGKILL usually comes from the out-of-memory killer: check memory use, "
                    "or `dmesg` for 'Out of memory')"
                )
        elif outcome.status == 0:
            message = (
                f"{where} exited with status 0 without returning a value "
                "(did the function call os._exit(), or start a process that replaced it?)"
            )
        elif record is not None:  # it returned, then something (an atexit handler, a thread) ended it badly
            message = f"{where} returned its value, then exited with {describe_status(outcome.status)}"
        else:
            message = f"{where} exited with {describe_status(outcome.status)} before returning a value"
        return RankExitError(message, rank=outcome.rank, exit_code=outcome.status)
    assert record is not None  # every other kind of ended rank has its record
    if kind is OutcomeKind.UNPICKLABLE_RESULT:
        return SerializationError(record.message)
    if kind in (OutcomeKind.EXITED, OutcomeKind.HOST_LOST):
        return RankExitError(f"{where}: {record.message}", rank=outcome.rank, exit_code=outcome.status)
    if kind is OutcomeKind.INTERRUPTED:
        return RankExitError(
            f"{where}: was interrupted (KeyboardInterrupt)", rank=outcome.rank, exit_code=outcome.status
        )
    original = _unpickle_exception(record.exception)
    if original is not None:
        return original
    return DistributedExecutionError(f"{record.error_type}: {record.message}", rank=outcome.rank)


def _unpickle_exception(data: Optional[bytes]) -> Optional[BaseException]:
    if data is None:
        return None
    try:
        error = pickle.loads(data)
    except Exception:  # noqa: BLE001 - the class lives in a module the caller cannot import
        return None
    return error if isinstance(error, BaseException) else None


def results_or_error(
    outcomes: Iterable[RankOutcome],
    stop_reason: Optional[StopReason],
    *,
    name: str,
    log_dir: str,
    timeout: Optional[float] = None,
    timeout_note: str = "",
    hints: Optional[Mapping[str, str]] = None,
    stop_report: Optional[StopReport] = None,
    live_ranks: Optional[Collection[int]] = None,
) -> List[Any]:
    """Every rank's return value in rank order, or what ended the call: a rank's own failure first, then an
    interrupt, then the timeout (``stop_reason``). Shared by local and Ray calls.

    ``name`` is the function's, for messages; ``log_dir`` holds every rank's output; ``timeout_note`` ends the
    timeout message (how to change the limit); ``hints``, ``stop_report`` (where the ranks were when stopping
    began) and ``live_ranks`` are :func:`build_error`'s.
    """
    ordered = sorted(outcomes, key=lambda outcome: outcome.rank)
    if any(o.failed_on_its_own for o in ordered):
        raise build_error(ordered, name, log_dir, hints, stop_report, live_ranks)
    if stop_reason is StopReason.INTERRUPT:
        raise KeyboardInterrupt
    if stop_reason is StopReason.TIMEOUT:
        sections = [
            f"{name} did not finish within its timeout of {timeout:g} s, so all {len(ordered)} ranks were "
            f"stopped. {timeout_note}".rstrip()
        ]
        if stop_report is not None:
            sections.append(stop_report.text())
        causes = likely_causes.section(likely_causes.find({o.rank: o.log_path for o in ordered}))
        if causes:
            sections.append(causes)
        sections.append(f"Every rank's output is in {log_dir}")
        raise LocalExecutionTimeoutError("\n\n".join(sections))
    return [o.value for o in ordered]


def build_error(
    outcomes: List[RankOutcome],
    name: str,
    log_dir: str,
    hints: Optional[Mapping[str, str]] = None,
    stop_report: Optional[StopReport] = None,
    live_ranks: Optional[Collection[int]] = None,
) -> DistributedExecutionError:
    """The exception for a call in which at least one rank failed on its own.

    Each thing is said once: the headline holds the error's message, the traceback its frames; the last lines of
    the failed rank's output are left out when the user has just seen them live (``live_ranks``, rank 0 by
    default). Each failed rank's traceback is appended to its log, where the likely causes are then looked for.
    """
    world_size = len(outcomes)
    failed = sorted((o for o in outcomes if o.failed_on_its_own), key=lambda o: o.failed_at)
    root = failed[0]
    failures = {o.rank: rank_exception(o, world_size) for o in failed}
    original = failures[root.rank]
    exit_codes = {o.rank: o.status for o in outcomes}
    record = root.record
    traceback_text = record.traceback if record is not None and root.kind is OutcomeKind.RAISED else None

    headline = _headline(root, original, world_size)
    sections = [f"{name}: {headline}"]
    frames = _frames_only(traceback_text, record) if traceback_text else ""
    if frames:
        sections.append(f"Traceback from rank {root.rank} (most recent call last):\n{frames}")
    tail = log_tail(root.log_path)
    if root.rank not in (live_ranks if live_ranks is not None else (0,)):
        sections.append(
            f"Last 50 lines of rank {root.rank}'s output ({root.log_path}):\n{tail}"
            if tail
            else f"Rank {root.rank} wrote no output ({root.log_path})."
        )
    keep_tracebacks_in_logs(outcomes)  # after the tail is read (it shows the rank's own output), before the scan
    evidence = f"{record.message if record is not None else ''}\n{tail}"
    sections += [advice for pattern, advice in (hints or {}).items() if pattern in evidence]
    skipped = skipped_collective(outcomes, root)
    if skipped:
        sections.append(skipped)
    found = likely_causes.find({o.rank: o.log_path for o in outcomes}, root.rank)
    if skipped:  # "another rank exited first (failed, or was stopped)" is what was just explained, better
        found = [cause for cause in found if not cause.found.pattern.consequence]
    causes = likely_causes.section(found)
    if causes:
        sections.append(causes)
    sections.append("Ranks:\n" + "\n".join(_rank_line(o, failures, root.rank) for o in outcomes))
    returned = {o.rank for o in outcomes if o.succeeded and not o.returned_when_stopped}
    stopped = sorted(
        rank
        for rank in (stop_report.snapshots if stop_report is not None else {})
        if rank not in failures and rank not in returned
    )
    # Where the ranks the launcher stopped were: not those that failed too, nor those whose function returned (the
    # snapshot may have caught one on its way out; the Ranks table says how it ended).
    if stop_report is not None and stopped:
        sections.append(stop_report.table(root.rank, stopped))
    sections.append(f"Every rank's output is in {log_dir}")
    message = "\n\n".join(sections)

    report: Dict[str, Any] = dict(
        rank=root.rank, failures=failures, exit_codes=exit_codes, remote_traceback=traceback_text, log_dir=log_dir
    )
    if isinstance(original, (RankExitError, DistributedExecutionError)):
        return DistributedExecutionError(message, **report)
    return combine_with_rank_exception(original, message, **report)


def skipped_collective(outcomes: List[RankOutcome], root: RankOutcome) -> Optional[str]:
    """Why the root-cause rank's collective failed when a peer *returned* without issuing it: gloo says only
    "Connection closed by peer" (the peer's process ended), which reads as if the peer had failed. ``None`` unless
    the root rank failed inside ``torch.distributed`` and a rank that returned issued fewer collectives of that
    process group (each rank's record says how far it got: :func:`~databricks.air._engine.rank.run_function`)."""
    record = root.record
    if record is None or _TORCH_DISTRIBUTED not in (record.traceback or ""):
        return None
    for group_id, group in sorted(_groups(record).items()):
        seq = int(group.get("enqueued", -1))
        early = []
        for outcome in outcomes:
            returned = outcome.succeeded and not outcome.returned_when_stopped  # on its own, not when stopped
            theirs = _groups(outcome.record).get(group_id) if returned else None
            if theirs is not None and int(theirs.get("enqueued", -1)) < seq:
                early.append((outcome.rank, max(0, int(theirs.get("enqueued", -1)))))
        if not early:
            continue
        op = str(group.get("last_op") or "collective")
        label = "the default group" if group.get("name") == "default_pg" or group_id == "0" else f"group {group_id}"
        one = len(early) == 1
        who = (
            f"rank {early[0][0]}"
            if one
            else "ranks " + ", ".join(str(r) for r, _ in early[:-1]) + f" and {early[-1][0]}"
        )
        counts = str(early[0][1]) if one else ", ".join(f"{count} (rank {rank})" for rank, count in early)
        plural = "" if one and early[0][1] == 1 else "s"
        return (
            f"{who[:1].upper()}{who[1:]} returned while rank {root.rank} still waited in {op} #{seq} of {label}, "
            f"having issued only {counts} collective{plural} there: {'it' if one else 'they'} skipped a collective "
            f"(or returned early), and rank {root.rank}'s {op} lost its peer when {who}'s process"
            f"{'' if one else 'es'} ended. Every rank must issue the same collectives in the same order: look for a "
            "branch on the rank or on the data that skips one, or a loop that runs a different number of times on "
            "different ranks."
        )
    return None


_TORCH_DISTRIBUTED = "torch/distributed/"


def _groups(record: Optional[RankRecord]) -> Dict[str, Dict[str, Any]]:
    """The process groups of a rank's record (``rank_probe.collective_positions``' answer), by id."""
    collectives = record.collectives if record is not None else None
    groups = (collectives or {}).get("groups") if isinstance(collectives, dict) else None
    return {str(key): value for key, value in groups.items()} if isinstance(groups, dict) else {}


def _frames_only(traceback_text: str, record: Optional[RankRecord]) -> str:
    """A rank's traceback without its first line (``Traceback (most recent call last):``) and without its last,
    the exception's own line, which the headline already says."""
    text = traceback_text.rstrip("\n")
    header = "Traceback (most recent call last):\n"
    if text.startswith(header):
        text = text[len(header) :]
    if record is not None:
        message = record.message or ""
        ending = f": {message}" if message else (record.error_type or "")
        cut = text.rfind("\n", 0, len(text) - len(ending)) if ending and text.endswith(ending) else -1
        if cut >= 0 and not text[cut + 1 :].startswith(" "):  # the exception's line, not a frame's source line
            text = text[:cut]
    return text


def keep_tracebacks_in_logs(outcomes: Iterable[RankOutcome]) -> None:
    """Append each rank's traceback to its log (``rank_<r>.txt``), where a user reading the file expects it, and
    the reason a return value could not come back.

    A rank does not print either: the caller's report shows it once; written to the live output too, it would be
    read twice (three times with the log's tail)."""
    for outcome in outcomes:
        record = outcome.record
        if record is None:
            continue
        if outcome.kind is OutcomeKind.RAISED and record.traceback:
            text = record.traceback
        elif outcome.kind is OutcomeKind.UNPICKLABLE_RESULT and record.message:
            text = PREFIX + f"{record.message}"
        else:
            continue
        try:
            with open(outcome.log_path, "a", encoding="utf-8", errors="replace") as log:
                log.write(text if text.endswith("\n") else text + "\n")
        except OSError:
            pass  # the log is the user's to keep; a report without it is still whole


def _headline(root: RankOutcome, original: BaseException, world_size: int) -> str:
    if isinstance(original, RankExitError):
        return str(original)
    record: RankRecord = root.record  # type: ignore[assignment]  # a rank that raised or could not return
    if root.kind is OutcomeKind.UNPICKLABLE_RESULT:
        return record.message
    type_name = record.error_type or type(original).__qualname__
    return f"rank {root.rank} of {world_size} raised {type_name}: {record.message}"


def _rank_line(outcome: RankOutcome, failures: Dict[int, BaseException], root: int) -> str:
    if outcome.rank == root:
        fate = "failed first (root cause)"
    elif outcome.rank in failures:
        fate = "also failed"
    elif outcome.succeeded and not outcome.returned_when_stopped:
        fate = "finished"
    elif outcome.stopped_by_launcher:
        fate = "stopped by the launcher"
    else:
        fate = "did not finish"
    return f"  rank {outcome.rank}: {fate}, {describe_status(outcome.status)}"
