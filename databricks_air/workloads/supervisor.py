"""The supervisor: what owns a run from submission to its end, whatever runs its nodes.

In order: resolve the secrets, prepare ``environment.dependencies`` (``PENDING``); then per attempt (``RUNNING``):
open its MLflow run, start the command on every node through a :class:`~.backends.base.NodeLauncher`, wait for it
to end, for ``timeout_minutes`` (``TIMEDOUT``) or for a cancel (``CANCELED``), close the MLflow run; a failed or
timed-out attempt is followed by another (``WAITING_FOR_RETRY``) while ``max_retries`` allows. Every change goes to
the run's state in the registry as it happens, fatal lines of the output as alerts. The local backend runs it in a
detached process (:mod:`.backends.local_supervisor`); a cluster backend can run it where the cluster does.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _settings, log_patterns
from databricks.air.workloads import attempt_tracking, environments, node_environment, registry, secret_store, statuses
from databricks.air.workloads.errors import WorkloadError
from databricks.air.workloads.backends.base import (
    AttemptLaunch,
    CannotPlace,
    NodeGroup,
    NodeLauncher,
    exit_codes_summary,
)
from databricks.air.workloads.node_environment import NodeVariables
from databricks.air.workloads.node_output import Echo, NodeOutput
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import Alert, Attempt, RunSpec, RunState
from databricks.air.workloads.workload import SecretRef

MAX_ALERTS = 100
CHECKPOINTS = "checkpoints"
"""The run's folder for ``databricks.air.data.Checkpointer`` (``AIR_CHECKPOINT_DIR``): every attempt finds the
checkpoints of the ones before."""
_POLL_SECONDS = 0.2
_ALERT_FLUSH_SECONDS = 1.0


def grace_seconds() -> float:
    """Seconds between SIGTERM and SIGKILL when an attempt is stopped (``DATABRICKS_AIR_TERMINATE_GRACE_SECONDS``,
    the decorator's, with the same default; checked by ``air run``)."""
    return _settings.TERMINATE_GRACE_SECONDS.read(os.environ)


class WorkloadSupervisor:
    """Runs a run's attempts; :meth:`run` returns its final status."""

    def __init__(
        self,
        folder: RunFolder,
        launcher: NodeLauncher,
        environ: Optional[Mapping[str, str]] = None,
        wake: Optional[threading.Event] = None,
        woken_reason: Optional[str] = None,
        echo: Optional[Callable[[int, int], Echo]] = None,
    ) -> None:
        self.folder = folder
        self.launcher = launcher
        self.environ = dict(os.environ if environ is None else environ)
        self.spec: RunSpec = folder.read_spec()
        self.wake = wake or threading.Event()
        """Set (by a signal handler, say) to make the supervisor stop the run at once."""
        self.woken_reason = woken_reason or f"stopped: the supervisor (pid {os.getpid()}) received SIGTERM"
        """Why the run stopped when :attr:`wake` was set without a cancel request in the folder."""
        self.echo = echo
        """Where a node's output goes besides its log (``echo(attempt, node)``), after secrets are redacted."""
        self._previous_run_id: Optional[str] = None
        """The MLflow run of the attempt before, which the next attempt's run names (attempts are linked)."""
        self._alerts: Dict[Tuple[int, int, str], Alert] = {}
        self._alerts_changed = False
        self._alerts_lock = threading.Lock()

    # --- the run ---------------------------------------------------------------------------------------------------

    def run(self) -> str:
        try:
            return self._run()
        except BaseException as error:  # noqa: BLE001 - whatever happens, the run must not stay active
            traceback.print_exc(file=sys.stderr)
            if registry.disk_full(error):
                where = f" while writing {error.filename}" if error.filename else ""
                reason = f"no space left on device{where}"
            else:
                reason = (
                    str(error)
                    if isinstance(error, WorkloadError)
                    else (f"the supervisor failed: {type(error).__name__}: {error}")
                )
            self._finish(statuses.FAILED, reason)
            return statuses.FAILED

    def _run(self) -> str:
        spec = self.spec
        secrets = secret_store.resolve(secret_refs(spec), self.environ)
        environment = None
        if spec.dependencies is not None and not self.launcher.installs_dependencies:
            self._update(message="installing environment.dependencies")
            os.makedirs(self.folder.attempt_dir(0), exist_ok=True)
            with open(self.folder.node_log(0, 0), "ab") as log:
                environment = environments.prepare(spec.dependencies, spec.base_dir, log)
            self._update(environment_path=environment.path)
        script = self._write_script()
        deadline_seconds = spec.timeout_seconds
        status, reason = statuses.FAILED, "no attempt ran"
        for number in range(spec.max_retries + 1):
            if self._cancel_asked():
                status, reason = statuses.CANCELED, "canceled before the attempt started"
                break
            status, reason, final = self._attempt(number, script, secrets, environment, deadline_seconds)
            if final or status in (statuses.SUCCESS, statuses.CANCELED) or number == spec.max_retries:
                break
            self._update(
                status=statuses.WAITING_FOR_RETRY,
                message=f"attempt {number} {status}: {reason}; retry {number + 1} of {spec.max_retries} next",
            )
            if self._sleep(_settings.RETRY_DELAY_SECONDS.read(os.environ)):
                status, reason = statuses.CANCELED, "canceled while waiting to retry"
                break
        self._finish(status, reason)
        return status

    def _write_script(self) -> str:
        path = self.folder.file("command.sh")
        registry.write_atomically(path, self.spec.command.encode(), mode=0o700)
        return path

    def _attempt(
        self,
        number: int,
        script: str,
        secrets: Dict[str, str],
        environment: Optional[environments.PreparedEnvironment],
        timeout: Optional[float],
    ) -> Tuple[str, str, bool]:
        """Run attempt ``number``: ``(status, reason, final)``, ``final`` when retrying cannot help."""
        started = time.time()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            group = self._reserve(number, deadline)
        except (CannotPlace, environments.DependencyInstallError) as error:
            return self._attempt_not_started(number, started, statuses.FAILED, str(error)) + (True,)
        except TimeoutError as error:
            return self._attempt_not_started(number, started, statuses.TIMEDOUT, str(error)) + (False,)
        except Exception as error:  # noqa: BLE001 - nodes that cannot be had now: a failed attempt, retried
            traceback.print_exc(file=sys.stderr)
            return self._attempt_not_started(
                number, started, statuses.FAILED, f"the attempt's nodes could not be reserved: {error}"
            ) + (False,)
        if group is None:
            return self._attempt_not_started(number, started, statuses.CANCELED, self._cancel_reason()) + (True,)
        try:
            return self._run_attempt(number, group, script, secrets, environment, started, timeout)
        finally:
            try:
                group.close()
            except Exception:  # noqa: BLE001 - the attempt's outcome stands; what was left is reported
                traceback.print_exc(file=sys.stderr)

    def _reserve(self, number: int, deadline: Optional[float]) -> Optional[NodeGroup]:
        """The attempt's nodes, or ``None`` when a cancel came while waiting for them."""
        plan = self.spec.node_plan
        if self.launcher.reserves_nodes:
            self._update(
                message=f"attempt {number}: placing {plan.num_nodes} node(s) of {plan.local_world_size} "
                f"{'CPU' if plan.cpu else 'GPU'}(s)"
            )

        def show_progress(text: str) -> None:
            self._update(message=f"attempt {number}: {text}")

        return self.launcher.reserve(plan, deadline, self._cancel_asked, show_progress)

    def _attempt_not_started(self, number: int, started: float, status: str, reason: str) -> Tuple[str, str]:
        """Record an attempt whose nodes were never had."""
        self._update(
            message=None, new_attempt=Attempt(number, status, started), end_attempt=(status, time.time(), None, reason)
        )
        return status, reason

    def _run_attempt(
        self,
        number: int,
        group: NodeGroup,
        script: str,
        secrets: Dict[str, str],
        environment: Optional[environments.PreparedEnvironment],
        started: float,
        timeout: Optional[float],
    ) -> Tuple[str, str, bool]:
        spec, plan = self.spec, self.spec.node_plan
        log_paths = [self.folder.node_log(number, node) for node in range(plan.num_nodes)]
        tracked = None
        if attempt_tracking.enabled():
            tracked = attempt_tracking.TrackedAttempt.open(
                spec,
                number,
                [self.folder.file(registry.CONFIG), self.folder.file(registry.HYPERPARAMETERS)],
                log_paths,
                previous_run_id=self._previous_run_id,
            )
            self._previous_run_id = tracked.run_id
        port = group.master_port()
        self._update(
            status=statuses.RUNNING,
            message=None,
            tracking_uri=tracked.tracking_uri if tracked else None,
            new_attempt=Attempt(
                number,
                statuses.RUNNING,
                started,
                mlflow_run_id=tracked.run_id if tracked else None,
                mlflow_experiment_id=tracked.experiment_id if tracked else None,
                master_port=port,
            ),
        )
        outputs = [
            NodeOutput(
                log_paths[node],
                self.folder.node_times(number, node),
                secret_store.known_values(self.environ, secrets),
                on_alert=functools.partial(self._alert, number, node),
                echo=self.echo(number, node) if self.echo else None,
                name=f"node {node}'s log",
            )
            for node in range(plan.num_nodes)
        ]
        status, reason, codes, final = statuses.FAILED, "", None, False
        try:
            launch = AttemptLaunch(
                number,
                script,
                spec.code_path,
                self._base_environ(environment),
                self._node_variables(group, port, secrets, tracked),
                outputs,
                grace_seconds(),
                spec.dependencies if self.launcher.installs_dependencies else None,
            )
            if tracked is not None:
                tracked.start()
            group.start(launch)
            self._update(owner_update={"attempt": group.owner()})
            status, reason, codes = self._wait(group, started, timeout, outputs)
            final = any(output.failure for output in outputs)  # another attempt would fill the same disk
        except environments.DependencyInstallError as error:
            status, reason, final = statuses.FAILED, str(error), True
        except Exception as error:  # noqa: BLE001 - an attempt that cannot start is a failed attempt
            traceback.print_exc(file=sys.stderr)
            status, reason = statuses.FAILED, f"the attempt could not start: {error}"
        finally:
            elapsed = time.time() - started
            for output in outputs:
                if status == statuses.FAILED and codes is not None:
                    output.write_note(f"ERROR: Script failed with exit code {max(codes)} after {elapsed:.1f}s")
                elif status == statuses.TIMEDOUT:
                    output.write_note(f"ERROR: Script stopped after {elapsed:.1f}s: {reason}")
                elif status == statuses.CANCELED:
                    output.write_note(f"Script canceled after {elapsed:.1f}s")
                output.close()
            self._flush_alerts()
            self._update(end_attempt=(status, time.time(), max(codes) if codes else None, reason or None))
            if tracked is not None:
                try:
                    tracked.close(status, reason)
                except Exception:  # noqa: BLE001 - the attempt's outcome stands even if its run cannot be closed
                    traceback.print_exc(file=sys.stderr)
        return status, reason, final

    def _base_environ(self, environment: Optional[environments.PreparedEnvironment]) -> Dict[str, str]:
        """The environment the nodes' variables are set on, where this supervisor runs."""
        # Only the secrets the workload names reach the command, under the names it gives them.
        base = node_environment.with_interpreter_on_path(secret_store.without_secret_variables(self.environ))
        if environment is not None:
            environment.apply(base)
        return base

    def _node_variables(
        self, group: NodeGroup, port: int, secrets: Dict[str, str], tracked: Optional[attempt_tracking.TrackedAttempt]
    ) -> List[NodeVariables]:
        spec, plan = self.spec, self.spec.node_plan
        hyperparameters = self.folder.node_file(registry.HYPERPARAMETERS) if spec.has_parameters else None
        address = group.master_address()
        if plan.cpu:
            devices = {"CUDA_VISIBLE_DEVICES": ""}  # CPU ranks: the command sees no GPU, as on a CPU node
        elif plan.visible_devices is not None:
            devices = {"CUDA_VISIBLE_DEVICES": plan.visible_devices}
        else:
            devices = {}
        return [
            NodeVariables(
                num_nodes=plan.num_nodes,
                node_rank=node,
                master_addr=address,
                master_port=port,
                local_world_size=plan.local_world_size,
                code_source_path=spec.code_path,
                hyperparameters_path=hyperparameters,
                tracking=tracked.environ() if tracked else None,
                workload_variables={**spec.env_variables, **secrets},
                device_variables=devices,
                checkpoint_dir=self.folder.node_file(CHECKPOINTS),
            )
            for node in range(plan.num_nodes)
        ]

    def _wait(
        self, group: NodeGroup, started: float, timeout: Optional[float], outputs: Sequence[NodeOutput] = ()
    ) -> Tuple[str, str, Optional[List[int]]]:
        deadline = None if timeout is None else started + timeout
        while True:
            codes = group.wait(_POLL_SECONDS)
            lost = next((output.failure for output in outputs if output.failure), None)
            if lost is not None:  # a log that cannot be written (a full disk): the attempt ends here
                if codes is None:
                    group.stop()
                    lost += "; the command was stopped"
                return statuses.FAILED, lost, None
            if codes is not None:
                failure = group.failure()
                if failure is not None:  # not the command's doing (its keeper was killed)
                    return statuses.FAILED, failure, codes
                if all(code == 0 for code in codes):
                    return statuses.SUCCESS, "", codes
                return statuses.FAILED, f"the command failed ({exit_codes_summary(codes)})", codes
            if self._cancel_asked():
                group.stop()
                return statuses.CANCELED, self._cancel_reason(), None
            if deadline is not None and time.time() >= deadline:
                group.stop()
                limit = f"{self.spec.timeout_minutes} min" if self.spec.timeout_minutes else f"{timeout:g} s"
                return statuses.TIMEDOUT, f"the attempt ran past its timeout ({limit}) and was stopped", None
            if self._alerts_changed:
                self._flush_alerts()

    # --- cancel ------------------------------------------------------------------------------------------------------

    def _cancel_asked(self) -> bool:
        if self.folder.cancel_requested:
            return True
        return self.wake.is_set()

    def _cancel_reason(self) -> str:
        if self.folder.cancel_requested:
            return "canceled (air cancel)"
        return self.woken_reason

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True if a cancel came meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self._cancel_asked():
                return True
            self.wake.wait(min(_POLL_SECONDS, max(0.0, end - time.monotonic())))
        return self._cancel_asked()

    # --- alerts ------------------------------------------------------------------------------------------------------

    def _alert(self, attempt: int, node: int, found: log_patterns.LogMatch) -> None:
        key = (attempt, node, found.pattern.id)
        with self._alerts_lock:
            known = self._alerts.get(key)
            if known is not None:
                known.count += 1
            elif len(self._alerts) < MAX_ALERTS:
                pattern = found.pattern
                self._alerts[key] = Alert(
                    attempt,
                    node,
                    found.line_number,
                    pattern.id,
                    pattern.title,
                    pattern.severity,
                    pattern.consequence,
                    found.hint,
                    found.line[:1000],
                )
            self._alerts_changed = True

    def _flush_alerts(self) -> None:
        with self._alerts_lock:
            if not self._alerts_changed:
                return
            alerts = [vars(alert).copy() for alert in self._alerts.values()]
            self._alerts_changed = False
        self._update(alerts=alerts)

    # --- state -------------------------------------------------------------------------------------------------------

    def _update(self, **changes: Any) -> RunState:
        def change(state: RunState) -> None:
            for name in ("status", "message", "tracking_uri", "environment_path", "alerts"):
                if name in changes:
                    setattr(state, name, changes[name])
            if "new_attempt" in changes:
                state.attempts.append(vars(changes["new_attempt"]).copy())
            if "owner_update" in changes:
                state.owner.update(changes["owner_update"])
            if "end_attempt" in changes and state.attempts:
                status, ended, code, reason = changes["end_attempt"]
                state.attempts[-1].update(status=status, ended_at=ended, exit_code=code, reason=reason)
                state.owner.pop("attempt", None)

        return self.folder.update(change)

    def _finish(self, status: str, reason: Optional[str]) -> None:
        def change(state: RunState) -> None:
            if state.terminal:
                return
            state.status = status
            state.message = reason or None
            state.ended_at = time.time()
            state.owner.pop("attempt", None)

        self.folder.update(change)


def secret_refs(spec: RunSpec) -> Dict[str, SecretRef]:
    """The spec's ``NAME -> scope/key`` as references."""
    return {name: secret_store.parse_ref(ref) for name, ref in spec.secrets.items()}
