"""Turning what failed ranks left behind into the one exception the caller sees.

The report names the root-cause rank (the first to fail), shows its remote traceback and the last 50 lines of its
output, and lists every rank's fate. The exception is an instance of the root-cause rank's own class *and* of
:class:`DistributedExecutionError` where that class can be rebuilt here.
"""

from __future__ import annotations

import dataclasses
import linecache
import pickle
import re
import signal
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

from databricks.air._engine.output import log_tail
from databricks.air.exceptions import (
    DistributedExecutionError,
    LocalExecutionTimeoutError,
    RankExitError,
    SerializationError,
    combine_with_rank_exception,
)

if TYPE_CHECKING:
    from databricks.air._engine.launch import Launch
    from databricks.air._engine.supervision import Supervisor


@dataclasses.dataclass
class RankOutcome:
    """How one rank ended, as far as the caller knows."""

    rank: int
    pid: int
    log_path: str
    status: Optional[int] = None
    """Exit status (negative: killed by that signal); ``None`` while running."""
    record: Optional[Dict[str, Any]] = None
    """What the rank wrote: ``{"ok": True, "value": ...}`` or a failure record."""
    exited_at: Optional[float] = None
    """``time.time()`` when the caller learned of the exit."""
    stopped_at: Optional[float] = None
    """``time.time()`` when the launcher began stopping this rank (another failed, timeout, interrupt)."""

    @property
    def stopped_by_launcher(self) -> bool:
        return self.stopped_at is not None

    @property
    def succeeded(self) -> bool:
        return self.status == 0 and self.record is not None and self.record.get("ok") is True

    @property
    def failed_on_its_own(self) -> bool:
        """It failed, and not merely because the launcher stopped it after another failure."""
        if self.status is None or self.succeeded:
            return False
        if self.stopped_at is None:
            return True
        # Stopped by the launcher: a failure only if it had already failed when the stop began.
        return self.record is not None and float(self.record.get("time", float("inf"))) < self.stopped_at

    @property
    def failed_at(self) -> float:
        if self.record is not None and "time" in self.record:
            return float(self.record["time"])
        return float(self.exited_at or 0.0)


def describe_status(status: Optional[int]) -> str:
    """``exit code 1``, ``killed by SIGKILL``..."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}"
    return f"exit code {status}"


def rank_exception(outcome: RankOutcome, world_size: int) -> BaseException:
    """The exception that stands for one failed rank."""
    record = outcome.record
    where = f"rank {outcome.rank} of {world_size}"
    if record is None:
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
        else:
            message = f"{where} exited with {describe_status(outcome.status)} before returning a value"
        return RankExitError(message, rank=outcome.rank, exit_code=outcome.status)
    if record["kind"] == "unpicklable-result":
        return SerializationError(record["message"])
    if record["kind"] in ("exit", "interrupted"):
        detail = record["message"] if record["kind"] == "exit" else "was interrupted (KeyboardInterrupt)"
        return RankExitError(f"{where}: {detail}", rank=outcome.rank, exit_code=outcome.status)
    original = _unpickle_exception(record.get("exception"))
    if original is not None:
        return original
    return DistributedExecutionError(f"{record['type']}: {record['message']}", rank=outcome.rank)


def _unpickle_exception(data: Optional[bytes]) -> Optional[BaseException]:
    if data is None:
        return None
    try:
        error = pickle.loads(data)
    except Exception:  # the class lives in a module the caller cannot import
        return None
    return error if isinstance(error, BaseException) else None


_DYNAMIC_FRAME = re.compile(r'^(\s*)File "<dynamic-code>", line (\d+), in (\S+)$')


def restore_code_files(traceback_text: str, code_files: Dict[str, str]) -> str:
    """Put real file names (and source lines, where the caller has them) into a rank's traceback.

    Functions shipped by value carry ``<dynamic-code>`` as their file; ``code_files`` maps function names back.
    """
    lines: List[str] = []
    for line in traceback_text.splitlines():
        match = _DYNAMIC_FRAME.match(line)
        filename = code_files.get(match.group(3)) if match else None
        if match is None or filename is None:
            lines.append(line)
            continue
        indent, number, function = match.groups()
        lines.append(f'{indent}File "{filename}", line {number}, in {function}')
        source = linecache.getline(filename, int(number)).strip()
        if source:
            lines.append(f"{indent}  {source}")
    return "\n".join(lines) + ("\n" if traceback_text.endswith("\n") else "")


def results_or_error(outcomes: Iterable[RankOutcome], launch: "Launch", supervisor: "Supervisor") -> List[Any]:
    """Every rank's return value in rank order, or what ended the call: a rank's own failure first, then an
    interrupt, then the timeout. Shared by local and Ray calls."""
    ordered = sorted(outcomes, key=lambda outcome: outcome.rank)
    if any(o.failed_on_its_own for o in ordered):
        raise build_error(ordered, launch.name, launch.log_dir, launch.code_files, launch.hints)
    if supervisor.interrupted:
        raise KeyboardInterrupt
    if supervisor.timed_out:
        raise LocalExecutionTimeoutError(
            f"{launch.name} did not finish within its timeout of {launch.timeout:g} s, so all {len(ordered)} ranks "
            f"were stopped. {launch.timeout_note}Every rank's output is in {launch.log_dir}"
        )
    return [o.record["value"] for o in ordered]  # type: ignore[index]


def build_error(
    outcomes: List[RankOutcome],
    name: str,
    log_dir: str,
    code_files: Optional[Dict[str, str]] = None,
    hints: Optional[Dict[str, str]] = None,
) -> DistributedExecutionError:
    """The exception for a call in which at least one rank failed on its own."""
    world_size = len(outcomes)
    failed = sorted((o for o in outcomes if o.failed_on_its_own), key=lambda o: o.failed_at)
    root = failed[0]
    failures = {o.rank: rank_exception(o, world_size) for o in failed}
    original = failures[root.rank]
    exit_codes = {o.rank: o.status for o in outcomes}
    record = root.record or {}
    traceback_text = record.get("traceback") if record.get("kind") == "raised" else None
    if traceback_text:
        traceback_text = restore_code_files(traceback_text, code_files or {})

    headline = _headline(root, original, record, world_size)
    sections = [f"{name}: {headline}"]
    if traceback_text:
        sections.append(f"Traceback from rank {root.rank}:\n{traceback_text.rstrip()}")
    tail = log_tail(root.log_path)
    sections.append(
        f"Last 50 lines of rank {root.rank}'s output ({root.log_path}):\n{tail}"
        if tail
        else f"Rank {root.rank} wrote no output ({root.log_path})."
    )
    evidence = f"{record.get('message', '')}\n{tail}"
    sections += [advice for pattern, advice in (hints or {}).items() if pattern in evidence]
    sections.append("Ranks:\n" + "\n".join(_rank_line(o, failures, root.rank) for o in outcomes))
    sections.append(f"Every rank's output is in {log_dir}")
    message = "\n\n".join(sections)

    report = dict(
        rank=root.rank, failures=failures, exit_codes=exit_codes, remote_traceback=traceback_text, log_dir=log_dir
    )
    if isinstance(original, (RankExitError, DistributedExecutionError)):
        return DistributedExecutionError(message, **report)
    return combine_with_rank_exception(original, message, **report)


def _headline(root: RankOutcome, original: BaseException, record: Dict[str, Any], world_size: int) -> str:
    if isinstance(original, RankExitError):
        return str(original)
    if record.get("kind") == "unpicklable-result":
        return f"{record['message']}"
    type_name = record.get("type", type(original).__qualname__)
    return f"rank {root.rank} of {world_size} raised {type_name}: {record.get('message', original)}"


def _rank_line(outcome: RankOutcome, failures: Dict[int, BaseException], root: int) -> str:
    if outcome.rank == root:
        fate = "failed first (root cause)"
    elif outcome.rank in failures:
        fate = "also failed"
    elif outcome.succeeded:
        fate = "finished"
    elif outcome.stopped_by_launcher:
        fate = "stopped by the launcher"
    else:
        fate = "did not finish"
    return f"  rank {outcome.rank}: {fate}, {describe_status(outcome.status)}"
