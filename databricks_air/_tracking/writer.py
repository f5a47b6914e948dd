"""The caller's side of the ranks' per-step metrics: one writer, in the caller, for every rank of a call.

Why the caller writes what the ranks log: a rank that writes its own batches runs MLflow's store code (SQLAlchemy,
pure Python) in a thread of the training process, and that thread holds the GIL while the training thread wants it
back after every operation that released it (a gloo all-reduce, a kernel). Measured on 2 CPU ranks
(``bench/metrics_logging.py``, the seed example): the loop with per-step logging ran 1.5 to 1.8 times the loop
without it when each rank wrote a batch a second, and 1.06 times when the same points were written after the loop.
The caller is idle while its ranks train, has MLflow loaded, and is one writer: with SQLite, the ranks no longer
take turns at the file's lock either.

A rank sends each batch (``(key, value, timestamp, step)`` tuples) over a Unix socket of the call (:mod:`.wire`: the
messages, and the rank's end), and the writer answers ``b"+"`` at once: from then on the batch is the caller's,
written before the call ends its run. A batch sent by a flush (``mlflow.flush_async_logging()``, the rank's end) is
answered only once it and everything before it are in the store, or with ``b"-"`` and the error, so that the rank
keeps it and says why (:mod:`databricks.air._tracking.rank_buffer`).

The writer puts the ranks' batches together and writes 1,000 points a ``log_batch`` (MLflow's limit): when 1,000
wait, when a rank flushes, when the oldest has waited ``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS`` times 5 (5 s by
default), and when the call ends. Fewer, fuller batches cost the ranks less: with the seed example's 5,000 points,
one rank's second at a time, the caller spent about 2.5 s of CPU time in ``log_batch`` (two SQLite commits each),
against 0.6 to 0.9 s in batches of 1,000, on a machine whose 2 cores the ranks keep busy. A batch that cannot be
written is kept and tried again; what still cannot be written when the call ends is counted on stderr.

Ranks that cannot reach the socket (on other machines, or once the call has ended) write their batches themselves.

The socket lies in a private folder of the writer's (``air-metrics-*`` in the temporary folder), in which the
writer's process holds a lock: a caller killed with ``kill -9`` leaves its folder behind, and the next writer on the
machine removes it (:func:`remove_orphaned_folders`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import secrets
import socket
import tempfile
import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any, Callable, List, Optional, Tuple

from databricks.air import _variables
from databricks.air._tracking import wire
from databricks.air._tracking.rank_buffer import BATCH as _BATCH
from databricks.air._tracking.rank_buffer import attempt, buffering_seconds
from databricks.air._tracking.wire import FAILED, OK
from databricks.air._notices import notice

_RETRY_SECONDS = 1.0  # a store that refused a batch is not asked again sooner


class MetricsWriter:
    """Listens for the ranks of one call and writes their batches into the call's run, put together."""

    def __init__(self, run_id: str, write: Callable[[str, List[Any]], None], hold: Optional[float] = None) -> None:
        self.run_id = run_id
        self._write = write  # (run_id, [Metric]): the caller's MlflowClient.log_batch
        self._hold = 5 * buffering_seconds() if hold is None else hold
        # 0700: only this user's processes can connect. A socket's path has at most 107 bytes: a long TMPDIR is
        # passed over for /tmp.
        where = tempfile.gettempdir() if len(tempfile.gettempdir()) < 60 else "/tmp"
        remove_orphaned_folders(where)
        self._folder, self._owner = _make_owned_folder(where)
        self.address = os.path.join(self._folder, "socket")
        self.authkey = secrets.token_hex(16)
        # every rank of a call connects at about the same time: room for them all in the backlog
        self._listener = Listener(self.address, family="AF_UNIX", backlog=64, authkey=self.authkey.encode())
        self._waiting: List[_Batch] = []  # received, not yet written
        self._points = 0
        self._now = False  # a rank flushes: write what waits without holding it
        self._closed = False
        self._failed_before = False
        self._retry_at = 0.0  # monotonic time before which a failed batch is not tried again
        self._changed = threading.Condition()
        self._accepting = threading.Thread(target=self._accept, name="databricks.air metrics writer", daemon=True)
        self._writing = threading.Thread(target=self._write_loop, name="databricks.air metrics writer", daemon=True)
        self._accepting.start()
        self._writing.start()

    def environ(self) -> dict:
        """What the ranks need to send here."""
        return {_variables.METRICS_ADDRESS: self.address, _variables.METRICS_KEY: self.authkey}

    def log(self, metrics: List[Any]) -> bool:
        """Queue the caller's own points (``mlflow.entities.Metric``: the straggler watch's figures) with the ranks';
        ``False`` once the writer is closed."""
        return self._take(self.run_id, list(metrics), now=False) == OK

    def close(self) -> None:
        """Write what was received and stop listening.

        Called when every rank has ended: a rank's last flush waits for its answer, so nothing else is on its way.
        A reader still waiting on a connection (kept open by a process the rank forked) ends with that connection.
        """
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._writing.join()
        self._wake_accept()
        self._accepting.join(10)
        self._listener.close()  # removes the socket file
        try:
            os.unlink(os.path.join(self._folder, OWNER_LOCK))
            os.rmdir(self._folder)
        except OSError:
            pass
        os.close(self._owner)

    # --- receiving ----------------------------------------------------------------------------------------------

    def _wake_accept(self) -> None:
        """End the accepting thread's ``accept()``: a plain connection that hangs up before the handshake.

        Not a ``Client``: that waits for the handshake, and would wait for ever if the thread had already gone.
        """
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.settimeout(5)
                wake.connect(self.address)
        except OSError:
            pass

    def _accept(self) -> None:
        # Only close() ends this loop, through its wake-up connection: a loop that tested ``_closed`` before each
        # accept() could end between a rank's connection and close(), and leave the wake-up unanswered.
        while True:
            try:
                connection = self._listener.accept()
            except Exception:  # noqa: BLE001 - closed, close()'s wake-up, or a process that did not know the key
                if self._closed:
                    return
                time.sleep(0.01)  # an error that lasts (no file descriptors left) does not spin a core
                continue
            if self._closed:
                connection.close()
                return
            threading.Thread(
                target=self._serve, args=(connection,), name="databricks.air metrics reader", daemon=True
            ).start()

    def _serve(self, connection: Connection) -> None:
        from mlflow.entities import Metric

        with connection:
            while True:
                try:
                    run_id, points, now = wire.decode(connection.recv_bytes())
                except (EOFError, OSError):
                    return  # the rank ended
                try:
                    answer = self._take(run_id, [Metric(k, v, t, s) for k, v, t, s in points], now)
                except Exception as error:  # noqa: BLE001 - said to the rank, which keeps its batch
                    answer = FAILED + f"{type(error).__name__}: {error}".encode(errors="replace")
                try:
                    connection.send_bytes(answer)
                except OSError:
                    return

    def _take(self, run_id: str, metrics: List[Any], now: bool) -> bytes:
        """Queue one rank's batch for writing; the answer for the rank (for ``now``, once it is written)."""
        if run_id != self.run_id:
            return FAILED + f"this call writes run {self.run_id}, not {run_id}".encode()
        batch = _Batch(metrics, now)
        with self._changed:
            if self._closed:
                return FAILED + b"the call has ended; the rank writes its metrics itself"
            self._waiting.append(batch)
            self._points += len(batch.metrics)
            self._now |= now
            self._changed.notify_all()
        if not now:
            return OK
        batch.done.wait()
        return batch.answer

    # --- writing ------------------------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._changed:
                while not self._due():
                    self._changed.wait(self._wait())
                batches, self._waiting, self._points, self._now = self._waiting, [], 0, False
                closing = self._closed
            kept = self._write_batches(batches, attempts=3 if closing else 1)
            if closing:
                if kept:
                    notice(
                        f"{sum(len(b.metrics) for b in kept)} metric point(s) the ranks logged could "
                        f"not be written to MLflow run {self.run_id} (see the error above); they are lost"
                    )
                return
            if kept:
                with self._changed:
                    self._waiting[:0] = kept  # in order, before what came since; tried again when due
                    self._points += sum(len(batch.metrics) for batch in kept)
                    self._retry_at = time.monotonic() + _RETRY_SECONDS

    def _write_batches(self, batches: List["_Batch"], attempts: int) -> List["_Batch"]:
        """Write the batches, 1,000 points a ``log_batch``; those received without a wait that could not be written."""
        kept: List[_Batch] = []
        for chunk in _chunks(batches):
            metrics = [metric for batch in chunk for metric in batch.metrics]
            error = attempt(lambda: self._write(self.run_id, metrics), attempts) if metrics else None
            if error is None:
                self._failed_before = False
            elif not self._failed_before:  # once per outage
                self._failed_before = True
                notice(
                    f"could not write the ranks' metrics to MLflow run {self.run_id} "
                    f"({type(error).__name__}: {error}); they are kept and written again"
                )
            for batch in chunk:
                if error is not None and not batch.waited_for:
                    kept.append(batch)
                    continue
                batch.answer = (
                    OK if error is None else FAILED + f"{type(error).__name__}: {error}".encode(errors="replace")
                )
                batch.done.set()
        return kept

    def _due(self) -> bool:
        if self._closed or self._now:
            return True
        if not self._waiting or time.monotonic() < self._retry_at:  # after a failure: not before a pause
            return False
        return self._points >= _BATCH or time.monotonic() - self._waiting[0].received >= self._hold

    def _wait(self) -> Optional[float]:
        if not self._waiting:
            return None
        due = self._retry_at if self._points >= _BATCH else max(self._retry_at, self._waiting[0].received + self._hold)
        return max(0.01, due - time.monotonic())


FOLDER_PREFIX = "air-metrics-"
OWNER_LOCK = "owner.lock"
"""The file in a writer's folder that its process holds locked (``flock``) while the folder is in use: the operating
system lets go of the lock when that process dies, ``kill -9`` included, so the next writer can tell a folder whose
owner is gone, and remove it (:func:`remove_orphaned_folders`)."""


def _make_owned_folder(where: str) -> Tuple[str, int]:
    """A new private folder under ``where`` and the descriptor holding its owner lock. The lock file gets its name
    only once it is locked, so a folder is never seen with its lock file unlocked while its owner lives."""
    folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=where)
    taking = os.path.join(folder, f".{OWNER_LOCK}")
    owner = os.open(taking, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(owner, fcntl.LOCK_EX)
        os.rename(taking, os.path.join(folder, OWNER_LOCK))
    except BaseException:
        os.close(owner)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder, owner


def remove_orphaned_folders(where: str) -> List[str]:
    """Remove the writers' folders under ``where`` whose owner is gone (its lock is free); return them. Folders of
    other users cannot be opened, and stay; so does a folder whose lock is still being taken."""
    removed: List[str] = []
    try:
        names = [entry.name for entry in os.scandir(where) if entry.name.startswith(FOLDER_PREFIX)]
    except OSError:
        return removed
    for name in names:
        folder = os.path.join(where, name)
        try:
            lock = os.open(os.path.join(folder, OWNER_LOCK), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner lives
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(lock)
    return removed


class _Batch:
    """One batch of one rank, until the writer answers it."""

    def __init__(self, metrics: List[Any], waited_for: bool) -> None:
        self.metrics = metrics
        self.waited_for = waited_for  # by a flush in the rank: answered once written (or failed)
        self.received = time.monotonic()
        self.done = threading.Event()
        self.answer = b""


def _chunks(batches: List[_Batch]) -> List[List[_Batch]]:
    """Whole batches, packed into ``log_batch`` calls of at most 1,000 points (a rank's batch never has more): a
    failed call fails only the batches in it, so a rank never writes a point twice."""
    chunks: List[List[_Batch]] = []
    size = 0
    for batch in batches:
        if not chunks or size + len(batch.metrics) > _BATCH:
            chunks.append([])
            size = 0
        chunks[-1].append(batch)
        size += len(batch.metrics)
    return chunks
