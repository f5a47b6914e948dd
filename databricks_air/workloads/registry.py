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
        .reserve                while the run runs: room for its last state writes should the disk fill up (local)

Ids are positive integers, given out in order under a lock on the registry; state changes are read-modify-write
under a lock on the run's folder, so the supervisor, ``cancel`` and readers that notice a dead supervisor never
lose each other's changes. An idempotency key maps to its run through ``keys/<sha256 of the key>``.

A full disk. A run's folder appears whole or not at all: it is made under a temporary name with its spec and first
state, then renamed. ``state.json`` is replaced atomically, so a write that fails leaves the last good state; the
local backend keeps ``.reserve`` (:data:`RESERVE_BYTES`) beside it and gives that room up when a state write finds
the disk full, so that the run's end can still be recorded. A folder whose spec or state cannot be read is
*damaged* (:class:`DamagedRun`, saying what is wrong and where): ``air list`` shows it as such, and the other runs as
usual.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Callable, Iterator, List, Optional, Tuple, TypeGuard

from databricks.air._rebuildable import RebuildableError
from databricks.air.workloads import paths
from databricks.air.workloads.errors import RunNotFound, WorkloadError
from databricks.air.workloads.run_state import RunSpec, RunState

STATE = "state.json"
SPEC = "spec.json"
CONFIG = "workload.yaml"
HYPERPARAMETERS = "hyperparameters.yaml"
CANCEL = "cancel"
RESERVE = ".reserve"
RESERVE_BYTES = 256 * 1024
"""Room for the last state writes of a run on a full disk: a state with the most alerts is about 150 KB, and an
atomic replace holds the old file and the new one at once."""
_NEW_PREFIX = ".new-"
"""A run's folder while it is being made (not yet a run: readers skip names that are not numbers)."""


def disk_full(error: BaseException) -> TypeGuard[OSError]:
    """Whether ``error`` says that the file system is full (or the user's quota used up)."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


class DamagedRun(RebuildableError, WorkloadError):
    """A run's folder whose ``state.json`` or ``spec.json`` cannot be read; ``str()`` says what is wrong and where.

    Attributes:
        run_id: the run.
        problem: what is wrong (``state.json is missing``, ``state.json is not valid JSON (...)``...).
        path: the file that is damaged.
    """

    def __init__(self, run_id: Any, problem: str = "", path: str = "") -> None:
        if not problem and not path and isinstance(run_id, str):  # the message alone (see RebuildableError)
            super().__init__(run_id)
        else:
            super().__init__(
                f"run {run_id} is damaged: {problem} ({path}), so air can neither show, follow nor "
                f"cancel it. Its other files (its logs under attempts/) are in {os.path.dirname(path)}; "
                "remove that folder to drop the run from air list"
            )
        self.run_id = run_id
        self.problem = problem
        self.path = path


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
        """The run's spec; :class:`DamagedRun` when ``spec.json`` is missing or not a spec."""
        try:
            return RunSpec.from_dict(self._read_json(SPEC))
        except ValueError as error:
            raise DamagedRun(self.run_id, f"{SPEC} is not a run's spec: {error}", self.file(SPEC)) from None

    def read_state(self) -> RunState:
        """The run's state; :class:`DamagedRun` when ``state.json`` is missing or not a state."""
        try:
            return RunState.from_dict(self._read_json(STATE))
        except ValueError as error:
            raise DamagedRun(self.run_id, f"{STATE} is not a run's state: {error}", self.file(STATE)) from None

    def _read_json(self, name: str) -> Any:
        """The JSON document of the file ``name`` (:class:`DamagedRun` when there is none)."""
        path = self.file(name)
        try:
            with open(path, "rb") as stream:
                data = stream.read()
        except FileNotFoundError:
            raise DamagedRun(self.run_id, f"{name} is missing", path) from None
        except PermissionError as error:  # another user's run in a shared registry: not damaged, not ours
            raise WorkloadError(f"run {self.run_id} cannot be read by this user ({error.strerror}): {path}") from None
        except OSError as error:
            raise DamagedRun(self.run_id, f"{name} cannot be read ({error.strerror or error})", path) from None
        if not data.strip():
            raise DamagedRun(self.run_id, f"{name} is empty", path)
        try:
            document = json.loads(data)
        except ValueError as error:
            raise DamagedRun(
                self.run_id, f"{name} is not valid JSON, cut short or overwritten ({error})", path
            ) from None
        return document

    def write_state(self, state: RunState) -> None:
        """Replace ``state.json`` atomically: a write that fails leaves the last good state. On a full disk the
        room kept in ``.reserve`` is given up for it."""
        data = json.dumps(state.to_dict(), indent=1).encode()
        try:
            write_atomically(self.file(STATE), data)
        except OSError as error:
            if not disk_full(error) or not self.release_reserve():
                raise
            write_atomically(self.file(STATE), data)

    def update(self, change: Callable[[RunState], Optional[RunState]]) -> RunState:
        """Read the state, apply ``change`` (which edits it in place or returns a new one), write it; under lock."""
        with locked(self.file(".lock")):
            state = self.read_state()
            state = change(state) or state
            self.write_state(state)
            return state

    def update_or_show(self, change: Callable[[RunState], Optional[RunState]]) -> Tuple[RunState, bool]:
        """:meth:`update`, for a reader: on a full disk, the state as ``change`` makes it but unsaved (the file
        keeps the last good state, and the next reader does the same). ``(state, saved)``."""
        try:
            return self.update(change), True
        except OSError as error:
            if not disk_full(error):
                raise
        state = self.read_state()
        return change(state) or state, False

    # --- room for the last writes --------------------------------------------------------------------------------

    def reserve_space(self, size: int = RESERVE_BYTES) -> None:
        """Set aside ``size`` bytes in ``.reserve`` (:class:`OSError` if the disk has not that much)."""
        path = self.file(RESERVE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as error:
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                _write_all(fd, b"\0" * size)  # where fallocate is not supported: blocks written are blocks held
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)

    def release_reserve(self) -> bool:
        """Give up ``.reserve``'s room; False when there was none."""
        try:
            os.unlink(self.file(RESERVE))
        except OSError:
            return False
        return True

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
        # Private to the user, all the way down: a run's logs hold what its command printed, and its configuration
        # the names of its secrets (older versions made these folders 0755; they are made private again here).
        home = [paths.air_home()] if self.root == paths.runs_dir() else []
        for folder in (*home, self.root, os.path.join(self.root, "keys")):
            os.makedirs(folder, mode=0o700, exist_ok=True)
            if os.stat(folder).st_uid == os.getuid() and os.stat(folder).st_mode & 0o077:
                os.chmod(folder, 0o700)

    def key_file(self, idempotency_key: str) -> str:
        return os.path.join(self.root, "keys", hashlib.sha256(idempotency_key.encode()).hexdigest())

    def create(
        self, spec_for: Callable[[int], RunSpec], state_for: Callable[[int], RunState], idempotency_key: str
    ) -> Tuple[RunFolder, bool]:
        """A new run folder with its spec and first state; or, for a known idempotency key, the existing run.

        The folder is made under a temporary name and renamed once its spec and state are written, so that no
        reader ever sees a run without them (a full disk leaves nothing behind: the :class:`OSError` is raised).
        Returns ``(folder, created)``.
        """
        self._ensure()
        key_file = self.key_file(idempotency_key)
        with locked(os.path.join(self.root, ".lock")):
            existing = _read_int(key_file)
            if existing is not None and os.path.isdir(os.path.join(self.root, str(existing))):
                return self.open(existing), False
            run_id = max(self.ids(), default=0) + 1
            path = os.path.join(self.root, str(run_id))
            making = tempfile.mkdtemp(prefix=f"{_NEW_PREFIX}{run_id}-", dir=self.root)  # mode 0700
            try:
                draft = RunFolder(making, run_id)
                write_atomically(draft.file(SPEC), json.dumps(spec_for(run_id).to_dict(), indent=1).encode())
                write_atomically(draft.file(STATE), json.dumps(state_for(run_id).to_dict(), indent=1).encode())
                os.rename(making, path)
            except BaseException:
                shutil.rmtree(making, ignore_errors=True)
                raise
            folder = RunFolder(path, run_id)
            try:
                write_atomically(key_file, str(run_id).encode())
            except BaseException:
                self.remove(folder, idempotency_key)
                raise
        return folder, True

    def remove(self, folder: RunFolder, idempotency_key: Optional[str] = None) -> None:
        """Delete a run that could not be submitted (its folder, and its idempotency key if it names it)."""
        if idempotency_key is not None:
            key_file = self.key_file(idempotency_key)
            if _read_int(key_file) == folder.run_id:
                with contextlib.suppress(OSError):
                    os.unlink(key_file)
        shutil.rmtree(folder.path, ignore_errors=True)

    def ids(self) -> List[int]:
        """Every run id, in no particular order."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return [int(name) for name in names if name.isdigit() and int(name) > 0]

    def open(self, run_id: int) -> RunFolder:
        """The folder of run ``run_id`` (:class:`RunNotFound` if there is none; reading a damaged one's state
        raises :class:`DamagedRun`)."""
        path = os.path.join(self.root, str(run_id))
        if not os.path.isdir(path):
            raise RunNotFound(f"run {run_id} not found in {self.root} (air list --all-status shows the runs there)")
        return RunFolder(path, run_id)

    def folders(self) -> Iterator[RunFolder]:
        """Every run, newest first (damaged ones too: their state cannot be read)."""
        for run_id in sorted(self.ids(), reverse=True):
            path = os.path.join(self.root, str(run_id))
            if os.path.isdir(path):
                yield RunFolder(path, run_id)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
