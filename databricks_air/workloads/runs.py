"""What the workload commands do, as functions: :func:`submit`, :func:`get`, :func:`list_runs`, :func:`cancel`.

The CLI parses arguments and shows what these return; they know nothing of terminals or JSON. Each run's backend
is the one recorded in its spec.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import getpass
import os
import time
import uuid
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _settings, _variables
from databricks.air._tracking import call_run
from databricks.air.workloads import (
    attempt_tracking,
    backends,
    loading,
    node_environment,
    registry,
    secret_store,
    snapshot,
    statuses,
    yaml_values,
)
from databricks.air.exceptions import RuntimeConfigurationError
from databricks.air.workloads.errors import InvalidArguments, NoSpaceLeft, WorkloadError
from databricks.air.workloads.registry import DamagedRun, Registry, RunFolder
from databricks.air.workloads.run_state import RunSpec, RunState
from databricks.air.workloads.schema import MAX_TOKEN
from databricks.air.workloads.workload import Workload

"""For tests: an attempt's time limit in seconds, in place of ``timeout_minutes`` (whose unit is a minute)."""
FILTER_KEYS = ("user", "experiment", "accelerator_type", "num_accelerators")


@dataclasses.dataclass
class Run:
    """A run as the commands show it: its spec, its state, and its folder."""

    folder: RunFolder
    spec: RunSpec
    state: RunState
    damage: Optional[DamagedRun] = None
    """For ``list`` only: the run's spec or state cannot be read (its status is ``DAMAGED``, its spec a stand-in
    with ``-`` where the spec is damaged)."""

    @property
    def run_id(self) -> int:
        return self.folder.run_id


@dataclasses.dataclass
class Submission:
    """What ``air run`` did."""

    run: Optional[Run]
    """``None`` for a dry run."""
    created: bool
    """False when the idempotency key named an existing run, which is returned instead."""
    notes: List[str]
    workload: Workload


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return str(os.getuid())


def _timeout_seconds(workload: Workload, environ: Mapping[str, str]) -> Optional[float]:
    override = _settings.WORKLOAD_TIMEOUT_SECONDS.read(environ)  # checked with the others by submit()
    if override is not None:
        return override
    return workload.timeout_minutes * 60.0 if workload.timeout_minutes else None


def submit(
    path: str,
    overrides: Sequence[str] = (),
    idempotency_key: Optional[str] = None,
    *,
    backend: str = backends.DEFAULT,
    dry_run: bool = False,
    environ: Optional[Mapping[str, str]] = None,
    backend_options: Optional[Mapping[str, object]] = None,
) -> Submission:
    """Validate the workload file and start a run of it (or, with ``dry_run``, only validate it).

    ``backend_options`` are the chosen backend's own (the Ray backend's ``address``, ``nodes``...).

    Raises:
        WorkloadFileError: the file or an override breaks a rule (nothing was recorded).
        UnsupportedHere: the backend cannot run this workload (nothing was recorded).
        SecretNotFound: a secret is missing (nothing was recorded).
    """
    environ = os.environ if environ is None else environ
    if idempotency_key is not None:
        idempotency_key = idempotency_key.strip()
        if not idempotency_key or len(idempotency_key) > MAX_TOKEN:
            raise InvalidArguments(f"--idempotency-key must be 1-{MAX_TOKEN} characters, not {len(idempotency_key)}")
    workload, notes = loading.load(path, overrides)
    chosen = backends.get(backend, **dict(backend_options or {}))
    if dry_run:
        try:
            chosen.plan(workload)
        except WorkloadError as error:
            notes.append(f"valid, but the {backend} backend could not run it: {error}")
        return Submission(None, False, notes, workload)
    plan = chosen.plan(workload)
    notes += chosen.notes(workload, plan)
    taken = sorted(set(workload.env_variables) & set(node_environment.RUNTIME_VARIABLES))
    if taken:
        notes.append(
            f"env_variables: {', '.join(taken)} are set by the runtime on each node; the workload's values are replaced"
        )
    try:  # a bad setting fails now, as it does a decorated function's call, not in the supervisor
        _settings.check(environ, _settings.WORKLOAD)
    except RuntimeConfigurationError as error:
        raise InvalidArguments(str(error)) from None
    secret_store.resolve(workload.secrets, environ)  # a missing secret fails now, not in the supervisor
    uri = environ.get("MLFLOW_TRACKING_URI", "")
    if attempt_tracking.enabled() and uri.startswith(("http://", "https://")):
        try:
            call_run._check_reachable(uri)  # the decorator's check: no run is recorded for a store that is down
        except RuntimeConfigurationError as error:
            raise WorkloadError(str(error)) from None
    key = idempotency_key or workload.idempotency_token or uuid.uuid4().hex
    runs = Registry()
    code_name = os.path.basename(workload.code_source.root_path.rstrip(os.sep)) if workload.code_source else None

    def spec_for(run_id: int) -> RunSpec:
        code_dir = os.path.join(runs.root, str(run_id), "code")
        return RunSpec(
            run_id=run_id,
            backend=chosen.name,
            experiment_name=workload.experiment_name,
            run_name=workload.run_name,
            command=workload.command,
            accelerator_type=workload.compute.accelerator_type,
            num_accelerators=workload.compute.num_accelerators,
            accelerators=workload.compute.display,
            plan=dataclasses.asdict(plan),
            max_retries=workload.max_retries,
            timeout_seconds=_timeout_seconds(workload, environ),
            timeout_minutes=workload.timeout_minutes,
            env_variables=dict(workload.env_variables),
            secrets={name: str(ref) for name, ref in workload.secrets.items()},
            dependencies=list(workload.environment.dependencies)
            if workload.environment.dependencies is not None
            else None,
            base_dir=workload.base_dir,
            has_parameters=workload.parameters is not None,
            submit_dir=os.getcwd(),
            user=_user(),
            idempotency_key=key,
            code_path=os.path.join(code_dir, code_name) if code_name else code_dir,
            environment_version=workload.environment.version,
            mlflow_experiment_directory=workload.mlflow_experiment_directory,
        )

    def state_for(run_id: int) -> RunState:
        return RunState(run_id=run_id, status=statuses.PENDING, submitted_at=time.time(), message="submitted")

    try:
        folder, created = runs.create(spec_for, state_for, key)
    except OSError as error:
        if registry.disk_full(error):
            raise _no_space(error, runs.root, "the run") from None
        raise
    if not created:
        existing = folder.read_state()
        notes.append(f"idempotency key {key!r} already names run {folder.run_id} ({existing.status}): no new run")
        return Submission(load_run(folder), False, notes, workload)
    try:
        registry.write_atomically(folder.file(registry.CONFIG), yaml_values.dump(workload.document).encode())
        if workload.parameters is not None:
            registry.write_atomically(
                folder.file(registry.HYPERPARAMETERS), yaml_values.dump(workload.parameters).encode()
            )
        os.makedirs(folder.code_dir)
        if workload.code_source is not None:
            snapshot.take(
                workload.code_source,
                folder.code_dir,
                "code_source.snapshot" if "snapshot" in workload.document["code_source"] else "code_source",
            )
        chosen.start(folder)
    except BaseException as error:
        if registry.disk_full(error):  # nothing could be recorded whole: nothing is kept
            runs.remove(folder, key)
            raise _no_space(error, runs.root, f"run {folder.run_id}") from None
        reason = f"the run could not be started: {error}"
        folder.update(lambda state: _end(state, statuses.FAILED, reason))
        raise
    return Submission(load_run(folder), True, notes, workload)


def _no_space(error: OSError, root: str, what: str) -> NoSpaceLeft:
    return NoSpaceLeft(
        f"no space left on device in {root}: {what} could not be recorded, and nothing was started "
        f"or kept. Free some space there (or move the registry with {_variables.HOME}) and submit "
        "again"
    )


def _end(state: RunState, status: str, reason: str) -> None:
    state.status, state.message, state.ended_at = status, reason, time.time()


def load_run(folder: RunFolder) -> Run:
    """The run of a folder, its state brought up to date by its backend."""
    spec = folder.read_spec()
    state = folder.read_state()
    if not state.terminal:
        state = backends.get(spec.backend).reconcile(folder, state)
    return Run(folder, spec, state)


def get(run_id: int) -> Run:
    """The run with this id, its state brought up to date (``RunNotFound`` if there is none, :class:`DamagedRun`
    if its state or spec cannot be read)."""
    if run_id <= 0:
        raise InvalidArguments(f"a run id is a positive integer, not {run_id}")
    return load_run(Registry().open(run_id))


def parse_filters(items: Iterable[str]) -> Dict[str, str]:
    """``--filter KEY=VALUE`` pairs, checked."""
    filters = {}
    for item in items:
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or key not in FILTER_KEYS:
            raise InvalidArguments(f"--filter takes KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}, not {item!r}")
        if key == "num_accelerators" and not (value.strip().isdigit() and int(value) > 0):
            raise InvalidArguments(f"--filter num_accelerators takes a positive integer, not {value!r}")
        filters[key] = value.strip()
    return filters


def _matches(run: Run, filters: Mapping[str, str]) -> bool:
    spec = run.spec
    checks = {
        "user": lambda v: spec.user == v,
        "experiment": lambda v: fnmatch.fnmatch(spec.experiment_name.lower(), v.lower()),
        "accelerator_type": lambda v: v.lower() in spec.accelerator_type.lower(),
        "num_accelerators": lambda v: spec.num_accelerators == int(v),
    }
    return all(checks[key](value) for key, value in filters.items())


def list_runs(
    limit: int = 20,
    all_status: bool = False,
    all_users: bool = False,
    filters: Optional[Mapping[str, str]] = None,
    damaged: bool = True,
) -> List[Run]:
    """The newest runs first: active ones only unless ``all_status``, this user's only unless ``all_users``.

    A run whose state or spec cannot be read is listed too, whatever ``all_status`` says (its status is unknown),
    with ``DAMAGED`` and what is wrong (:attr:`Run.damage`); ``damaged=False`` leaves such runs out.
    """
    if limit <= 0:
        raise InvalidArguments(f"--limit must be positive, not {limit}")
    filters = dict(filters or {})
    if not all_users and "user" not in filters:
        filters["user"] = _user()
    found = []
    for folder in Registry().folders():
        try:
            run = load_run(folder)
        except DamagedRun as damage:
            if not damaged:
                continue
            run = _damaged_run(folder, damage)
            if run.spec.user == "-" and not _owned_by_me(folder, filters, all_users):
                continue
            if run.spec.user != "-" and not _matches(run, filters):
                continue
            found.append(run)
        except (OSError, ValueError, WorkloadError):
            continue  # another user's folder that this one cannot read: list the others
        else:
            if not (all_status or not run.state.terminal) or not _matches(run, filters):
                continue
            found.append(run)
        if len(found) >= limit:
            break
    return found


def _damaged_run(folder: RunFolder, damage: DamagedRun) -> Run:
    """A damaged run as ``list`` shows it: its spec if that can be read, and the status ``DAMAGED``."""
    try:
        spec = folder.read_spec()
    except DamagedRun:
        spec = RunSpec(
            run_id=folder.run_id,
            backend="-",
            experiment_name="-",
            run_name="-",
            command="",
            accelerator_type="-",
            num_accelerators=0,
            accelerators="-",
            plan={},
            max_retries=0,
            timeout_seconds=None,
            timeout_minutes=None,
            env_variables={},
            secrets={},
            dependencies=None,
            base_dir="",
            has_parameters=False,
            submit_dir="",
            user="-",
            idempotency_key="",
            code_path="",
        )
    try:
        made = os.stat(folder.path).st_mtime
    except OSError:
        made = time.time()
    state = RunState(run_id=folder.run_id, status=statuses.DAMAGED, submitted_at=made, message=damage.problem)
    return Run(folder, spec, state, damage)


def _owned_by_me(folder: RunFolder, filters: Mapping[str, str], all_users: bool) -> bool:
    """For a run without a readable spec: only a user filter can be checked, by the folder's owner."""
    if set(filters) - {"user"} or filters.get("user", _user()) != _user():
        return False  # an experiment or accelerator filter cannot match what cannot be read
    if all_users:
        return True
    try:
        return os.stat(folder.path).st_uid == os.getuid()
    except OSError:
        return False


@dataclasses.dataclass
class CancelResult:
    canceled: List[int]
    failed: List[Tuple[int, str]]
    runs: List[Run]
    """Every run asked to stop, as it was once it stopped (or when waiting for it gave up)."""


def active_runs() -> List[Run]:
    """This user's runs that have not ended (what ``cancel --all`` stops; damaged runs are not known to run)."""
    return list_runs(limit=1 << 30, damaged=False)


def cancel(run_ids: Sequence[int], wait_seconds: float = 30.0) -> CancelResult:
    """Ask each run to stop, then wait (up to ``wait_seconds`` in all) until they read ``CANCELED``.

    A run already ``CANCELED`` counts as canceled; one that ended otherwise, or is unknown, as failed.
    """
    canceled, failed, asked = [], [], []
    for run_id in run_ids:
        try:
            run = get(run_id)
        except WorkloadError as error:
            failed.append((run_id, str(error)))
            continue
        if run.state.status == statuses.CANCELED:
            canceled.append(run_id)
            asked.append(run)
            continue
        if run.state.terminal:
            failed.append((run_id, f"run {run_id} has already ended ({run.state.status}): nothing to cancel"))
            continue
        backends.get(run.spec.backend).request_cancel(run.folder, run.state)
        asked.append(run)
    deadline = time.monotonic() + wait_seconds
    final = []
    for run in asked:
        current = load_run(run.folder)
        while not current.state.terminal and time.monotonic() < deadline:
            time.sleep(0.1)
            current = load_run(run.folder)
        final.append(current)
        if run.run_id in canceled:
            continue
        if current.state.terminal and current.state.status != statuses.CANCELED:
            failed.append((run.run_id, f"run {run.run_id} ended {current.state.status} before it could be canceled"))
        else:
            canceled.append(run.run_id)  # CANCELED, or still stopping when the wait ended (it is asynchronous)
    return CancelResult(canceled, failed, final)
