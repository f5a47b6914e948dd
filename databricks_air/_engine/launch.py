"""The engine's entry point: choose the way a call's ranks start (:func:`call_class`), and run them (:func:`run`).

The engine knows nothing of MLflow or accelerator names: it runs a pickled function once per rank with a
torchrun-compatible environment and returns every rank's value in rank order, or raises. Where the ranks run is
chosen here, and only here (:func:`call_class`): on this machine
(:class:`~databricks.air._engine.local_call.LocalCall`), or on the connected Ray cluster
(:class:`~databricks.air._ray.ray_call.RayCall`). The caller chooses once, and asks the chosen class what differs
(its checks, getting ready for a call that comes soon, whether the ranks run on this machine). Both follow the
contract of :class:`~databricks.air._engine.call.Call`:

* the first failing rank stops all others at once (SIGTERM to each rank and everything it started, SIGKILL after
  ``grace_period``; the rules are :class:`~databricks.air._engine.supervision.RankSupervisor`'s);
* ``timeout`` bounds the whole call (:class:`LocalExecutionTimeoutError`);
* ``KeyboardInterrupt`` stops every rank and every process a rank started, then propagates (a second one skips
  the grace period);
* nothing of the call is left when :func:`run` returns or raises: no process, no private file, no reservation.

Example::

    launch = Launch(name="train", world_size=2, function=..., arguments=..., environ=dict(os.environ),
                    cwd=os.getcwd(), sys_path=list(sys.path), argv=list(sys.argv), log_dir=log_dir, timeout=600)
    calls = call_class(remote=False)  # LocalCall
    calls.prewarm(launch.environ)     # optional: the rank server imports torch meanwhile
    values = run(launch, calls)       # [value of rank 0, value of rank 1]
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, List, Mapping, Optional, Type

from databricks.air._call_folder import CallFolder
from databricks.air._engine import gpu_leases, restarts
from databricks.air._engine.call import Call, Launch
from databricks.air._engine.local_call import LocalCall
from databricks.air.exceptions import LocalExecutionTimeoutError
from databricks.air._notices import notice

__all__ = ["Call", "Launch", "call_class", "leasable_gpus", "run", "simulated_gpus"]


def call_class(remote: bool) -> Type[Call]:
    """The way a call starts its ranks: on the connected Ray cluster (``remote``), or on this machine."""
    if remote:
        from databricks.air._ray.ray_call import RayCall  # Ray is optional: imported for remote runs only

        return RayCall
    return LocalCall


def leasable_gpus(environ: Mapping[str, str], count: int) -> List[str]:
    """The GPUs of this machine a local call may lease (:attr:`Launch.gpus`), ``count`` being how many it sees."""
    return gpu_leases.node_devices(environ, count)


def simulated_gpus(environ: Mapping[str, str]) -> Optional[int]:
    """The GPU count ``DATABRICKS_AIR_SIMULATE_GPUS`` makes this node show (ranks then run on CPUs), or ``None``."""
    return gpu_leases.simulated_count(environ)


def run(launch: Launch, calls: Type[Call] = LocalCall) -> List[Any]:
    """Run ``launch`` the way ``calls`` starts ranks (:func:`call_class`) and return every rank's value, indexed by
    global rank.

    With ``max_restarts``, a failure that is not the function's own (:mod:`.restarts`) stops every rank, keeps the
    attempt's logs and reports in ``attempt_<n>/`` of the log folder, and starts every rank again, within the one
    deadline of the whole call; the cell gets one line per restart. The last attempt's error is raised, saying
    what was decided after each failure, and why.
    """
    deadline = launch.deadline
    if deadline is None and launch.timeout is not None:
        deadline = time.monotonic() + launch.timeout
    attempt = dataclasses.replace(launch, deadline=deadline)
    history: List[restarts.Restart] = []
    while True:
        call = calls(attempt)
        try:
            return call.run()
        except (KeyboardInterrupt, LocalExecutionTimeoutError):
            raise  # the caller's decision, or the whole call's deadline: never restarted
        except BaseException as error:
            if launch.max_restarts <= 0:
                raise
            decision = restarts.decide(
                error,
                call.outcomes.values(),
                attempt=attempt.attempt,
                max_restarts=launch.max_restarts,
                restart_on=launch.restart_on,
                history=history,
                now=time.monotonic(),
            )
            if not decision.restart:
                _say_what_was_decided(error, [*history, decision])
                raise
            history.append(decision)
            restarts.keep_attempt(launch.log_dir, attempt.attempt)
            notice(
                f"{decision.cause}; restart {attempt.attempt + 1} of {launch.max_restarts}"
                f"{restarts.resuming_from(launch.log_dir)} (attempt {attempt.attempt}'s logs: "
                f"{CallFolder(launch.log_dir).attempt(attempt.attempt)})"
            )
            if launch.on_restart is not None:
                launch.on_restart(decision)
            attempt = dataclasses.replace(attempt, attempt=attempt.attempt + 1)


def _say_what_was_decided(error: BaseException, decisions: List[restarts.Restart]) -> None:
    """Add to the report of ``error`` (the last attempt's) what failed in each attempt, and whether it restarted."""
    lines = [
        f"  attempt {d.attempt}: {d.cause}: {'restarted' if d.restart else 'not restarted'}: {d.why}" for d in decisions
    ]
    section = "Restarts (max_restarts):\n" + "\n".join(lines)
    report = getattr(error, "_report", None)
    if isinstance(report, str):
        error._report = f"{report}\n\n{section}"  # type: ignore[attr-defined]
    elif hasattr(error, "add_note"):
        error.add_note(section)
