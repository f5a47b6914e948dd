"""Whether a failed call starts its ranks again: what counts as the machine's fault, and the thrash guard.

A call with ``max_restarts`` (``@distributed(max_restarts=N)``) that fails for a reason that is not the function's
own is run again: every rank, the same arguments, world size and MLflow run, ``TORCHELASTIC_RESTART_COUNT`` one
higher. What is restarted (:func:`decide`):

* a rank killed by a signal (the kernel's OOM killer, a GPU that fell off the bus and took the process with it);
* a lost peer or rendezvous, and a collective that timed out: an error raised inside ``torch.distributed``
  (``DistNetworkError``, ``DistStoreError``, gloo's "Connection closed by peer", NCCL's watchdog);
* a fatal line of the machine's making in any rank's output (:data:`MACHINE_FAULTS`: Xid, ECC, NCCL system and
  remote errors...), unless a line says the function itself faulted (:data:`FUNCTION_FAULTS`: an illegal memory
  access, out of memory: it would fail the same way again);
* an exception of a class named in ``restart_on``.

Anything else the function raised is its own failure, and raised at once. A call that fails again within
:data:`THRASH_SECONDS` of a restart, for the same cause, stops restarting and says so: whatever it is, the next
attempt would end the same way.

This module decides; the loop that stops, keeps and starts again is :func:`databricks.air._engine.launch.run`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _variables, log_patterns
from databricks.air._call_folder import CallFolder
from databricks.air._engine import likely_causes
from databricks.air._engine.outcome import RankOutcome, describe_status
from databricks.air.exceptions import DistributedExecutionError, RankExitError

THRASH_SECONDS = 60.0

MACHINE_FAULTS = frozenset(
    {
        "host-oom-killer",
        "process-killed",
        "segmentation-fault",
        "xid",
        "gpu-ecc-error",
        "nccl-watchdog-timeout",
        "nccl-operations-failed",
        "nccl-watchdog-stuck",
        "nccl-system-error",
        "nccl-remote-error",
        "nccl-transport-error",
        "store-clients-timeout",
        "store-connect-timeout",
        "store-wait-timeout",
        "gloo-peer-closed",
        "gloo-operation-timeout",
    }
)
"""Fatal lines (:mod:`databricks.air.log_patterns` ids) that say the machine or a peer failed, not the function."""

FUNCTION_FAULTS = frozenset({"cuda-illegal-memory-access", "cuda-oom", "collective-mismatch"})
"""Fatal lines that say the function itself is at fault: a restart would fail the same way."""

_DISTRIBUTED_ERRORS = ("DistNetworkError", "DistStoreError", "DistBackendError", "DistError")
_TORCH_DISTRIBUTED = "torch/distributed/"


@dataclasses.dataclass(frozen=True)
class Restart:
    """What ended one attempt, and whether (and why) the ranks start again."""

    attempt: int
    """The attempt that failed (0 for the first)."""
    cause: str
    """What failed, in a few words (``rank 3 was killed by SIGKILL``)."""
    key: str
    """The cause, for the thrash guard: two failures with one key failed the same way."""
    restart: bool
    why: str
    """Why the ranks start again, or why not."""
    failed_at: float
    """When the attempt failed (``time.monotonic()``)."""


def decide(
    error: BaseException,
    outcomes: Iterable[RankOutcome],
    *,
    attempt: int,
    max_restarts: int,
    restart_on: Sequence[type],
    history: Sequence[Restart],
    now: float,
) -> Restart:
    """Whether attempt ``attempt``, which failed with ``error``, is restarted (``history``: the earlier ones)."""
    ordered = sorted(outcomes, key=lambda outcome: outcome.rank)
    cause, key, machine, reason = _classify(error, ordered, restart_on)
    if not machine:
        return Restart(attempt, cause, key, False, reason, now)
    if attempt >= max_restarts:
        return Restart(attempt, cause, key, False, f"{reason}, but all {max_restarts} restart(s) are used", now)
    if history and history[-1].key == key and now - history[-1].failed_at < THRASH_SECONDS:
        return Restart(
            attempt,
            cause,
            key,
            False,
            f"it failed again for the same cause within {THRASH_SECONDS:.0f} s of restart {attempt}, so it is not "
            "restarted again: the next attempt would end the same way",
            now,
        )
    return Restart(attempt, cause, key, True, reason, now)


def _classify(
    error: BaseException, outcomes: Sequence[RankOutcome], restart_on: Sequence[type]
) -> Tuple[str, str, bool, str]:
    """``(cause, key, the machine's fault?, reason)`` for the error that ended an attempt."""
    if not isinstance(error, DistributedExecutionError) or error.rank is None:
        name = type(error).__name__
        if isinstance(error, tuple(restart_on)):
            return f"{name}: {error}", f"raised:{name}", True, f"{name} is named in restart_on"
        if name == "OutputCollectionError":  # the rank server died: the machine's
            return str(error), "server-lost", True, "the process that started the ranks was lost"
        return f"{name}: {error}", f"raised:{name}", False, f"{name} is not a failure a restart can mend"
    root = error.rank
    own = error.failures.get(root)
    by_rank = {outcome.rank: outcome for outcome in outcomes}
    patterns = _fatal_pattern_ids(by_rank)
    # A rank killed by a signal explains its peers' lost connections, whichever of them the caller heard of first.
    killed = sorted(
        (rank, failure.exit_code)
        for rank, failure in error.failures.items()
        if isinstance(failure, RankExitError) and failure.exit_code is not None and failure.exit_code < 0
    )
    if killed:
        rank, code = killed[0]
        guess = " (the kernel's OOM killer?)" if code == -signal.SIGKILL else ""
        return (
            f"rank {rank} was {describe_status(code)}{guess}",
            f"signal:{-code}",
            True,
            "a rank was killed by a signal",
        )
    function_faults = sorted(patterns & FUNCTION_FAULTS)
    if function_faults:
        title = log_patterns.by_id(function_faults[0]).title
        return f"rank {root}: {title}", f"line:{function_faults[0]}", False, f"{title} is the function's own fault"
    own_name = type(own).__name__ if own is not None else "an error"
    if own is not None and isinstance(own, tuple(restart_on)):
        return (
            f"rank {root} raised {own_name}: {own}",
            f"raised:{own_name}",
            True,
            f"{own_name} is named in restart_on",
        )
    traceback_text = error.remote_traceback or ""
    if own_name in _DISTRIBUTED_ERRORS or _TORCH_DISTRIBUTED in traceback_text:
        return (
            f"rank {root} lost its peers ({own_name}: {_first_line(own)})",
            f"distributed:{own_name}",
            True,
            "a peer, the rendezvous or a collective failed",
        )
    machine = sorted(patterns & MACHINE_FAULTS)
    if machine:
        title = log_patterns.by_id(machine[0]).title
        return f"rank {root}: {title}", f"line:{machine[0]}", True, f"{title} is the machine's fault"
    if isinstance(own, RankExitError):
        return (
            f"rank {root} exited with code {own.exit_code}",
            f"exit:{own.exit_code}",
            False,
            "a rank that exits with an error code of its own is the function's failure",
        )
    return (
        f"rank {root} raised {own_name}: {_first_line(own)}",
        f"raised:{own_name}",
        False,
        f"{own_name} came from the function (name it in restart_on=(...) to restart on it)",
    )


def _fatal_pattern_ids(outcomes: Mapping[int, RankOutcome]) -> set:
    found = likely_causes.find({rank: outcome.log_path for rank, outcome in outcomes.items()})
    return {cause.found.pattern.id for cause in found if cause.found.pattern.severity == log_patterns.FATAL}


def _first_line(error: Optional[BaseException]) -> str:
    text = str(error or "").strip().splitlines()
    return text[0][:200] if text else ""


def keep_attempt(log_dir: str, attempt: int) -> Optional[str]:
    """Move the files a failed attempt left at the top of the call's log folder (each rank's output, its reports)
    into ``attempt_<n>/``, so that the next attempt writes afresh and nothing of this one is lost. Dot files (the
    caller's lock) stay. Returns the folder, or ``None`` when there was nothing to keep."""
    folder = CallFolder(log_dir)
    kept = folder.attempt(attempt)
    moved: List[str] = []
    for name in folder.attempt_files():
        if not moved:
            os.makedirs(kept, exist_ok=True)
        os.replace(os.path.join(log_dir, name), os.path.join(kept, name))
        moved.append(name)
    return kept if moved else None


def last_checkpoint_environ(log_dir: str) -> Dict[str, str]:
    """What tells rank 0's ``Checkpointer`` where to note each checkpoint it saves (``.last_checkpoint`` in the call's
    log folder: the step of the last checkpoint rank 0 saved with ``databricks.air.data.Checkpointer``, a line
    ``STEP PATH``)."""
    return {_variables.LAST_CHECKPOINT_FILE: CallFolder(log_dir).last_checkpoint}


def resuming_from(log_dir: str) -> str:
    """`` from step N`` when rank 0 noted a checkpoint (the next attempt's ``Checkpointer.restore`` resumes there),
    else nothing: the function starts again, and what it restores is its own business."""
    try:
        with open(CallFolder(log_dir).last_checkpoint, encoding="utf-8") as note:
            step = note.read().split()[0]
    except (OSError, IndexError):
        return ""
    return f" from step {step}" if step.isdigit() else ""
