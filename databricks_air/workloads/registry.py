"""The run registry: one folder per run under ``~/.air/runs`` (``DATABRICKS_AIR_HOME`` moves it).

A run's folder::

    runs/17/
        workload.yaml           the configuration as run (overrides applied; secrets are scope/key references)
        spec.json               what the backend needs, fixed at submission
        state.json              status, attempts, alerts, owner; rewritten atomically (write, fsync, rename)
        hyperparameters.yaml    the workload's parameters, when it has some
        code/<folder>/          the code snapshot (CODE_SOURCE_PATH)
        attempts/<a>/node_<n>.log     each attempt's output, per node (and node_<n>.times: when each part came)
        cancel                  present once a cancel was asked for
        supervisor.log          the local supervisor's own messages

Ids are positive integers, given out in order under a lock on the registry; state changes are read-modify-write
under a lock on the run's folder, so the supervisor, ``cancel`` and readers that notice a dead supervisor never
lose each other's changes. An idempotency key maps to its run through ``keys/<sha256 of the key>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from typing import Callable, Iterator, List, Optional, Tuple

from databricks.air.workloads import paths
from databricks.air.workloads.errors import RunNotFound, WorkloadError
from databricks.air.workloads.run_state import RunSpec, RunState

STATE = "state.json"
SPEC = "spec.json"
CONFIG = "workload.yaml"
HYPERPARAMETERS = "hyperparameters.yaml"
CANCEL = "cancel"


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old content or the new, never a part."""
    folder = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing) for the ``with`` block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class RunFolder:
    """One run's folder."""

    def __init__(self, path: str, run_id: int) -> None:
        self.path = path
        self.run_id = run_id

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def node_file(self, name: str) -> str:
        """Where the nodes' commands find the run's file ``name`` (on a cluster: in their copy of the run's files)."""
        return self.file(name)

    @property
    def code_dir(self) -> str:
        return self.file("code")

    def attempt_dir(self, attempt: int) -> str:
        return os.path.join(self.path, "attempts", str(attempt))

    def node_log(self, attempt: int, node: int) -> str:
        return os.path.join(self.attempt_dir(attempt), f"node_{node}.log")

    def node_times(self, attempt: int, node: int) -> str:
        return os.path.join(self.attempt_dir(attempt), f"node_{node}.times")

    # --- spec and state ------------------------------------------------------------------------------------------

    def read_spec(self) -> RunSpec:
        with open(self.file(SPEC), encoding="utf-8") as stream:
            return RunSpec.from_dict(json.load(stream))

    def read_state(self) -> RunState:
        try:
            with open(self.file(STATE), encoding="utf-8") as stream:
                return RunState.from_dict(json.load(stream))
        except (OSError, ValueError) as error:
            raise WorkloadError(f"run {self.run_id}: its state cannot be read ({error}); its folder is {self.path}") from None

    def write_state(self, state: RunState) -> None:
        write_atomically(self.file(STATE), json.dumps(state.to_dict(), indent=1).encode())

    def update(self, change: Callable[[RunState], Optional[RunState]]) -> RunState:
        """Read the state, apply ``change`` (which edits it in place or returns a new one), write it; under lock."""
        with locked(self.file(".lock")):
            state = self.read_state()
            state = change(state) or state
            self.write_state(state)
            return state

    @property
    def cancel_requested(self) -> bool:
        return os.path.exists(self.file(CANCEL))

    def request_cancel(self) -> None:
        with open(self.file(CANCEL), "a", encoding="utf-8"):
            pass


class Registry:
    """The folder of every run."""

    def __init__(self, root: Optional[str] = None) -> None:
        self.root = root or paths.runs_dir()

    def _ensure(self) -> None:
        os.makedirs(os.path.join(self.root, "keys"), mode=0o700, exist_ok=True)

    def create(self, spec_for: Callable[[int], RunSpec], state_for: Callable[[int], RunState],
               idempotency_key: str) -> Tuple[RunFolder, bool]:
        """A new run folder with its spec and first state; or, for a known idempotency key, the existing run.

        Returns ``(folder, created)``.
        """
        self._ensure()
        key_file = os.path.join(self.root, "keys", hashlib.sha256(idempotency_key.encode()).hexdigest())
        with locked(os.path.join(self.root, ".lock")):
            existing = _read_int(key_file)
            if existing is not None and os.path.isdir(os.path.join(self.root, str(existing))):
                return self.open(existing), False
            run_id = max(self.ids(), default=0) + 1
            path = os.path.join(self.root, str(run_id))
            os.mkdir(path, 0o700)
            folder = RunFolder(path, run_id)
            write_atomically(folder.file(SPEC), json.dumps(spec_for(run_id).to_dict(), indent=1).encode())
            folder.write_state(state_for(run_id))
            write_atomically(key_file, str(run_id).encode())
        return folder, True

    def ids(self) -> List[int]:
        """Every run id, in no particular order."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return [int(name) for name in names if name.isdigit() and int(name) > 0]

    def open(self, run_id: int) -> RunFolder:
        path = os.path.join(self.root, str(run_id))
        if not os.path.isfile(os.path.join(path, STATE)):
            raise RunNotFound(f"run {run_id} not found in {self.root} (air list --all-status shows the runs there)")
        return RunFolder(path, run_id)

    def folders(self) -> Iterator[RunFolder]:
        """Every run, newest first."""
        for run_id in sorted(self.ids(), reverse=True):
            path = os.path.join(self.root, str(run_id))
            if os.path.isfile(os.path.join(path, STATE)):
                yield RunFolder(path, run_id)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
