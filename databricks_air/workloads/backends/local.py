"""The local backend: the workload runs on this machine, owned by a detached supervisor process.

``start`` launches ``python -m databricks.air.workloads.backends.local_supervisor RUN_FOLDER`` in a session of its
own (closing the terminal, or ``air run`` ending, changes nothing), with the submitter's environment and working
directory, its output in the run's ``supervisor.log``. The registry records its pid and start time, so a reader can
tell a live supervisor from a dead one (or a reused pid): a run whose supervisor died reads ``FAILED`` with that
reason (its command died with it: see :mod:`.keeper`), never ``RUNNING`` forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import List, Optional

from databricks.air import _variables, compute
from databricks.air.workloads import attempt_tracking, statuses
from databricks.air.workloads.backends import keeper, local_supervisor
from databricks.air.workloads.backends.base import Backend
from databricks.air.workloads.errors import UnsupportedHere, WorkloadError
from databricks.air.workloads.registry import RunFolder
from databricks.air.workloads.run_state import NodePlan, RunState
from databricks.air.workloads.workload import Workload

HANDOVER_SECONDS = 60.0
"""How long a run may go without a recorded supervisor before readers call it failed (submission interrupted)."""


def process_start_time(pid: int) -> Optional[int]:
    """The start time of a live process (clock ticks since boot), ``None`` when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def supervisor_alive(owner: dict) -> bool:
    """Whether the supervisor recorded in ``owner`` is still that process."""
    pid = owner.get("supervisor_pid")
    return pid is not None and process_start_time(pid) == owner.get("supervisor_started")


class LocalBackend(Backend):
    """This machine: one node, its GPUs (or CPU ranks)."""

    name = "local"

    def plan(self, workload: Workload) -> NodePlan:
        wanted = workload.compute
        if workload.image_field is not None:
            raise UnsupportedHere(
                f"environment.{workload.image_field}: a container image needs a container runtime, which the local "
                "backend does not have. Run this workload on Databricks, or list its packages in "
                "environment.dependencies instead."
            )
        if workload.schedule is not None:
            raise UnsupportedHere(
                "schedule: the local backend runs a workload once, now; a schedule needs a "
                "scheduler (Databricks jobs). Remove schedule to run it here."
            )
        if wanted.accelerator_type == compute.CPU or compute.cpu_mode_from_environment():
            return NodePlan(1, wanted.num_accelerators, cpu=True)
        per_node = wanted.gpus_per_node or 1
        if wanted.nodes > 1:
            raise UnsupportedHere(
                f"compute: {wanted.num_accelerators} x {wanted.accelerator_type} GPUs is {wanted.nodes} nodes of "
                f"{per_node}, and the local backend runs on this machine only. Run it on a cluster with the Ray "
                f"backend, use num_accelerators: {per_node} here, or try it on CPU ranks with "
                f"{_variables.ACCELERATOR_TYPE}=CPU."
            )
        available = compute.attached_gpu_count()
        if available <= 0:
            raise UnsupportedHere(
                f"compute.accelerator_type: {wanted.accelerator_type} needs GPUs, and none is attached to this "
                f"machine. "
                f"For CPU ranks over gloo, set accelerator_type: CPU, or keep the file as it is and set "
                f"{_variables.ACCELERATOR_TYPE}=CPU."
            )
        if wanted.num_accelerators > available:
            raise UnsupportedHere(
                f"compute.num_accelerators: {wanted.num_accelerators} GPUs asked for, but only {available} are visible "
                "on this machine (CUDA_VISIBLE_DEVICES is honoured)."
            )
        return NodePlan(
            1, wanted.num_accelerators, cpu=False, visible_devices=_first_devices(wanted.num_accelerators, available)
        )

    def notes(self, workload: Workload, plan: NodePlan) -> List[str]:
        notes = []
        wanted = workload.compute
        if plan.cpu and wanted.accelerator_type != compute.CPU:
            notes.append(
                f"{_variables.ACCELERATOR_TYPE}=CPU: running {wanted.accelerator_type} x "
                f"{wanted.num_accelerators} as {plan.local_world_size} CPU rank(s)"
            )
        if not plan.cpu:
            device = compute.attached_gpu_name() or "unknown GPU"
            model = compute.parse_gpu_model(device)
            if model is None or model is not compute.AcceleratorType(wanted.accelerator_type).gpu_type:
                notes.append(
                    f"compute.accelerator_type is {wanted.accelerator_type}, this machine has {device}: "
                    f"running on {plan.local_world_size} of its GPUs"
                )
        if workload.databricks_only_fields:
            notes.append(
                f"not used on this machine (kept for Databricks): {', '.join(workload.databricks_only_fields)}"
            )
        return notes

    def start(self, folder: RunFolder) -> None:
        spec = folder.read_spec()
        folder.reserve_space()  # room to record the run's end should its output fill the disk
        with open(folder.file("supervisor.log"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", local_supervisor.__name__, folder.path],
                cwd=spec.submit_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        owner = {"supervisor_pid": process.pid, "supervisor_started": process_start_time(process.pid)}
        try:
            folder.update(lambda state: state.owner.update(owner))
        except BaseException:
            process.kill()  # a supervisor that the registry does not know of must not run the workload
            process.wait()
            raise

    def request_cancel(self, folder: RunFolder, state: RunState) -> None:
        folder.request_cancel()  # first: a supervisor that is only starting looks at it before every attempt
        if supervisor_alive(state.owner):
            try:
                os.kill(state.owner["supervisor_pid"], signal.SIGTERM)  # wakes it up; it stops the command itself
            except ProcessLookupError:
                pass

    def reconcile(self, folder: RunFolder, state: RunState) -> RunState:
        if state.terminal or supervisor_alive(state.owner):
            return state
        pid = state.owner.get("supervisor_pid")
        if pid is None:
            if time.time() - state.submitted_at < HANDOVER_SECONDS:
                return state  # being submitted right now
            reason = "the run was never handed to a supervisor (its submission was interrupted)"
        else:
            left = _stop_leftovers(folder)
            reason = (
                f"the supervisor (pid {pid}) ended unexpectedly, killed or crashed; the command and every "
                f"process it started were stopped with it"
                + (f" ({left} left without their keeper were killed now)" if left else "")
                + f" (its messages: {folder.file('supervisor.log')})"
                + _full_disk_note(folder.path)
            )
        canceled = folder.cancel_requested
        ended = {}

        def change(current: RunState) -> None:
            if current.terminal or supervisor_alive(current.owner):
                return
            current.status = statuses.CANCELED if canceled else statuses.FAILED
            current.message = "canceled (air cancel)" if canceled else reason
            current.ended_at = time.time()
            if current.attempts and current.attempts[-1].get("ended_at") is None:
                current.attempts[-1].update(status=current.status, ended_at=current.ended_at, reason=current.message)
                ended.update(current.attempts[-1])
            current.owner.pop("attempt", None)

        state, saved = folder.update_or_show(change)  # a full disk: shown as it is, saved by a later reader
        if saved and state.terminal:
            folder.release_reserve()
        if saved and ended.get("mlflow_run_id") and state.tracking_uri:
            try:
                attempt_tracking.end_orphaned(state.tracking_uri, ended["mlflow_run_id"], state.message or reason)
            except Exception as error:  # noqa: BLE001 - the registry's state is what matters; MLflow is best effort
                print(f"air: could not end MLflow run {ended['mlflow_run_id']}: {error}", file=sys.stderr)
        return state


def _stop_leftovers(folder: RunFolder) -> int:
    """Kill what is left of the run's command when its supervisor and its keeper were both killed (a keeper that
    lives stops the command itself); the command's processes are known by their ``CODE_SOURCE_PATH``. How many."""
    try:
        code_path = folder.read_spec().code_path
    except WorkloadError:
        return 0
    found = keeper.with_variable("CODE_SOURCE_PATH", code_path)
    if not found or any(keeper.is_keeper(pid) for pid in found):
        return 0
    killed = set()
    for _ in range(20):  # a process may fork while it is being killed: until none is left
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed.update(found)
        time.sleep(0.05)
        found = keeper.with_variable("CODE_SOURCE_PATH", code_path)
        if not found:
            break
    return len(killed)


def _full_disk_note(path: str) -> str:
    """``; the disk of PATH is full...`` when it is, the likely reason a supervisor died without a word."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return ""
    if stats.f_bavail * stats.f_frsize >= 4096:
        return ""
    return f"; the file system of {path} is full, which is the likely cause"


def _first_devices(count: int, available: int) -> Optional[str]:
    """``CUDA_VISIBLE_DEVICES`` for the first ``count`` visible GPUs; ``None`` when all of them are used."""
    if count >= available:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in visible.split(",")] if visible is not None else [str(i) for i in range(available)]
    return ",".join(devices[:count])
