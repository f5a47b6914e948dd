"""GPU leases shared by every call of this user on this node: a call runs on GPUs no other call holds.

A call that uses GPUs takes a lease on as many free GPUs as it has ranks (:func:`take`), and holds it until its last
rank has ended (:meth:`Lease.release`). The table is a folder of lock files, one per GPU
(``<temp>/databricks-air-<uid>/gpus``, :mod:`.user_folder`), locked with ``flock``: the operating system drops a
lock when its holder dies, even by SIGKILL, so a killed caller's GPUs are free at once and no daemon is needed. Locks
of one open file conflict with those of another in the same process too, so calls from threads lease like calls
from processes.

A call that finds too few free GPUs waits, first come first served: each waiter holds a ticket (a locked file in
``gpus/queue``, named by its arrival time), and only the oldest live ticket may take GPUs. A ticket whose holder
died is unlocked, and is dropped by the next waiter that looks.

A GPU is named as ``CUDA_VISIBLE_DEVICES`` names it where the caller runs (an index, or a ``GPU-``/``MIG-`` UUID),
or ``0`` to ``N-1`` when nothing restricts the caller; two callers that name one GPU differently (an index here, its
UUID there) are not seen to share it. :data:`SIMULATE_VARIABLE` (``DATABRICKS_AIR_SIMULATE_GPUS=N``) makes the node
look as if it had ``N`` GPUs, for tests and CI: the leases are real, the ranks run on CPUs.

Example::

    lease = take(2, os.environ, name="train", deadline=time.monotonic() + 600, on_wait=print)
    try:
        environ.update(lease.environ())   # CUDA_VISIBLE_DEVICES for the ranks, unless the first GPUs were leased
        ...
    finally:
        lease.release()
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import threading
import time
import uuid
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from databricks.air import _variables
from databricks.air._engine.user_folder import user_folder

SIMULATE_VARIABLE = _variables.SIMULATE_GPUS
_AFTER_EVERY_TICKET = "~"  # sorts after every ticket name (digits)
POLL_SECONDS = 0.05
"""How often a waiting call looks again: a freed GPU is taken within this."""


class LeaseTimeout(TimeoutError):
    """The deadline came while a call still waited for GPUs; nothing was started."""


class LeaseCancelled(KeyboardInterrupt):
    """The call was cancelled while it waited for GPUs; nothing was started. A cancel is an interrupt that did not
    come through a signal, and ends the call as one (its run ``KILLED``)."""


def simulated_count(environ: Mapping[str, str]) -> Optional[int]:
    """The GPU count ``DATABRICKS_AIR_SIMULATE_GPUS`` asks for, or ``None`` when it is unset (0 counts as unset)."""
    from databricks.air import _settings

    return _settings.SIMULATE_GPUS.read(environ)


def node_devices(environ: Mapping[str, str], count: int) -> List[str]:
    """The GPUs a caller with ``environ`` may lease, in its order; ``count`` is how many it sees."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if simulated_count(environ) is None and visible is not None:
        names = [entry.strip() for entry in visible.split(",")]
        return names[:count]
    return [str(index) for index in range(count)]


@dataclasses.dataclass
class Lease:
    """GPUs held by one call, until :meth:`release` (or the holder's death)."""

    devices: Tuple[str, ...]
    """The leased GPUs, as ``CUDA_VISIBLE_DEVICES`` names them."""
    first: bool
    """True when the lease is the first ``len(devices)`` GPUs the caller sees: ranks keep the caller's view."""
    waited: float = 0.0
    """Seconds spent waiting for the GPUs."""
    _files: List[int] = dataclasses.field(default_factory=list, repr=False)

    def environ(self) -> Dict[str, str]:
        """What the ranks' environment gets: ``CUDA_VISIBLE_DEVICES`` set to the leased GPUs, so that
        ``cuda:LOCAL_RANK`` is one of the call's own; nothing when the lease is the first GPUs (the reference's
        behaviour: every GPU stays visible)."""
        return {} if self.first else {"CUDA_VISIBLE_DEVICES": ",".join(self.devices)}

    def release(self) -> None:
        """Give the GPUs back (closing the files drops their locks); safe to call twice."""
        files, self._files = self._files, []
        for fd in files:
            os.close(fd)


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a GPU now: what its lock file says."""

    device: str
    pid: int
    call: str
    """One token per lease: two calls of one process are two calls."""
    name: str


def take(
    count: int,
    environ: Mapping[str, str],
    devices: Sequence[str],
    *,
    name: str,
    deadline: Optional[float] = None,
    on_wait: Optional[Callable[[str], None]] = None,
    cancelled: Optional[threading.Event] = None,
    folder: Optional[str] = None,
) -> Lease:
    """Lease ``count`` of ``devices`` for the call ``name``; wait, first come first served, while too few are free.

    ``on_wait`` is called once, with what the call waits for, when it cannot start at once. Raises
    :class:`LeaseTimeout` at ``deadline`` (a ``time.monotonic()`` time) and :class:`LeaseCancelled` when
    ``cancelled`` is set, having taken nothing; ``KeyboardInterrupt`` likewise leaves nothing held.
    """
    if count > len(devices):
        raise ValueError(f"{count} GPUs asked of {len(devices)}")
    table = folder or user_folder("gpus")
    queue = os.path.join(table, "queue")
    os.makedirs(queue, mode=0o700, exist_ok=True)
    started = time.monotonic()
    # Straight in only when nobody waits: a GPU freed while others wait is theirs first.
    lease = _try_take(table, count, devices, name) if _first_in(queue, _AFTER_EVERY_TICKET) else None
    if lease is not None:
        return lease
    ticket, ticket_fd = _enqueue(queue)
    said = False
    try:
        while True:
            if _first_in(queue, ticket):
                lease = _try_take(table, count, devices, name)
                if lease is not None:
                    lease.waited = time.monotonic() - started
                    return lease
            if not said and on_wait is not None:
                said = True
                on_wait(_waiting_for(table, count, devices))
            if cancelled is not None and cancelled.is_set():
                raise LeaseCancelled(f"{name} was cancelled while it waited for {count} GPU(s)")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise LeaseTimeout(
                    f"{name} waited {now - started:.0f} s for {count} GPU(s) and reached its timeout before any "
                    f"were free: {_waiting_for(table, count, devices, with_wait=False)}"
                )
            pause = POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - now))
            if cancelled is not None:
                cancelled.wait(pause)
            else:
                time.sleep(pause)
    finally:
        _leave(ticket, ticket_fd)


def holders(table: str, devices: Sequence[str]) -> List[Holder]:
    """Who holds each of ``devices`` now (a GPU that is free is not listed)."""
    found = []
    for device in devices:
        path = _lock_path(table, device)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid, call, name = (os.pread(fd, 4096, 0).decode(errors="replace").split(" ", 2) + ["", ""])[:3]
                found.append(Holder(device, int(pid) if pid.isdigit() else 0, call, name.strip()))
        finally:
            os.close(fd)  # a lock this look took goes with it
    return found


# --- taking -----------------------------------------------------------------------------------------------------------


def _try_take(table: str, count: int, devices: Sequence[str], name: str) -> Optional[Lease]:
    """The first ``count`` free ``devices``, locked; ``None`` (holding nothing) when fewer are free.

    One taker at a time (a lock on the table): two calls taking at once would otherwise interleave, one GPU each
    in turn, and lease ``0,2`` and ``1,3`` where ``0,1`` and ``2,3`` were free."""
    fd = os.open(os.path.join(table, ".taking.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return _take_free(table, count, devices, name)
    finally:
        os.close(fd)


def _take_free(table: str, count: int, devices: Sequence[str], name: str) -> Optional[Lease]:
    taken: List[Tuple[str, int]] = []
    try:
        for device in devices:
            fd = os.open(_lock_path(table, device), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            taken.append((device, fd))
            if len(taken) == count:
                break
    except BaseException:
        for _, fd in taken:
            os.close(fd)
        raise
    if len(taken) < count:
        for _, fd in taken:
            os.close(fd)
        return None
    token = uuid.uuid4().hex[:12]
    for _, fd in taken:  # who holds it, for the waiting message of others
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {token} {name}".encode(), 0)
    chosen = tuple(device for device, _ in taken)
    return Lease(devices=chosen, first=chosen == tuple(devices[:count]), _files=[fd for _, fd in taken])


def _lock_path(table: str, device: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device)
    return os.path.join(table, f"gpu-{safe}.lock")


# --- the queue --------------------------------------------------------------------------------------------------------


def _enqueue(queue: str) -> Tuple[str, int]:
    """A ticket at the end of the queue, locked before it shows (renamed in), so no looker takes it for dead."""
    stamp = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
    hidden = os.path.join(queue, f".{stamp}")
    fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ticket = os.path.join(queue, stamp)
    os.rename(hidden, ticket)
    return ticket, fd


def _first_in(queue: str, ticket: str) -> bool:
    """True when no live ticket is older than ``ticket``; dead tickets found on the way are removed."""
    mine = os.path.basename(ticket)
    for other in sorted(os.listdir(queue)):
        if other.startswith(".") or other >= mine:
            continue
        path = os.path.join(queue, other)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False  # a live waiter came first
        try:
            os.unlink(path)  # its holder died (or has just left): it waits no more
        except FileNotFoundError:
            pass
        os.close(fd)
    return True


def _leave(ticket: str, fd: int) -> None:
    try:
        os.unlink(ticket)
    except FileNotFoundError:
        pass
    os.close(fd)


def _waiting_for(table: str, count: int, devices: Sequence[str], with_wait: bool = True) -> str:
    held = holders(table, devices)
    pids = sorted({holder.pid for holder in held})
    calls = len({holder.call for holder in held})
    head = f"waiting for {count} GPU(s): " if with_wait else ""
    return (
        f"{head}{len(held)} of {len(devices)} leased by {calls} call(s) "
        f"(pid{'s' if len(pids) != 1 else ''} {', '.join(map(str, pids)) or '?'})"
    )
