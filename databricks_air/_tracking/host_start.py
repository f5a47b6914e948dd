"""Which calls use the tracking host (:mod:`.tracking_host`), where this interpreter's host lives, and starting it.

A call uses the host when it would otherwise import MLflow first (:func:`preferred`): MLflow is not imported in the
caller (a caller that imported it may have chosen a store, an experiment or a parent run in it, which the host could
not see), the caller is not interactive (a notebook imports MLflow between its cells, for free: see :mod:`.warmup`),
tracking is on, ``DATABRICKS_AIR_TRACKING_HOST`` is not off, and the caller is not a rank. Decoration starts the host
in the background if none runs (:func:`start_host_in_background`, from :func:`.warmup.start`).
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import fcntl
import functools
import threading
from typing import List, Optional, Tuple

from databricks.air import _notebook, _variables
from databricks.air._switches import switched_off

HOST_MODULE = "databricks.air._tracking.tracking_host"
SOCKET = "host.sock"
LOCK = "host.lock"
LOG = "host.log"
PID = "host.pid"


def take_lock(folder: str) -> Optional[int]:
    """The host lock of ``folder``, taken (a file descriptor to keep open), or ``None`` when a host holds it."""
    fd = os.open(os.path.join(folder, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def host_running(folder: str) -> bool:
    """Whether a host holds ``folder``'s lock: one runs there, or is starting."""
    lock = take_lock(folder)
    if lock is None:
        return True
    os.close(lock)
    return False


def preferred() -> bool:
    """Whether this process's calls use the tracking host (see the module docstring)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(socket, "send_fds")
        and not switched_off(_variables.TRACKING_HOST)
        and not switched_off(_variables.MLFLOW)
        and "RANK" not in os.environ
        and "mlflow" not in sys.modules
        and not _interactive()
    )


def _interactive() -> bool:
    interpreter = hasattr(sys, "ps1") or bool(sys.flags.interactive)
    return interpreter or "IPython" in sys.modules or _notebook.in_jupyter_kernel()


def folder() -> str:
    """This interpreter's host folder: one per Python, package set and version of this package (a host started
    before an upgrade is not used after it)."""
    from databricks.air._engine.user_folder import user_folder

    return user_folder("tracking", _fingerprint())


@functools.lru_cache(maxsize=None)
def _fingerprint() -> str:
    """Computed once per process: the code this process runs is what it loaded."""
    site = [entry for entry in sys.path if "site-packages" in entry or "dist-packages" in entry]
    stamps: List[Tuple[str, float]] = []
    for entry in site:
        try:
            stamps.append((entry, os.stat(entry).st_mtime))
        except OSError:
            pass
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    newest = 0.0
    for root, _dirs, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    described = repr((sys.executable, os.environ.get("PYTHONPATH", ""), stamps, package, newest))
    return hashlib.sha256(described.encode()).hexdigest()[:16]


_start_lock = threading.Lock()


def start_host() -> None:
    """Start this interpreter's tracking host unless one runs or is starting (it exits at once if another took the
    lock meanwhile); returns at once."""
    with _start_lock:
        where = folder()
        if host_running(where):
            return  # the lock is free for the host now (another caller starting one too: one of them exits at once)
        from databricks.air._engine.processes import python_command

        environ = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_")}
        with open(os.path.join(where, LOG), "ab") as log:
            subprocess.Popen(
                python_command(HOST_MODULE, [where]),
                env=environ,
                cwd=where,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # neither a terminal's Ctrl-C nor the caller's end stops it
                close_fds=True,
            )


def start_host_in_background() -> None:
    """:func:`start_host` on a thread (what decoration does): the folder check is file system work."""
    thread = threading.Thread(target=_start_quietly, name="databricks.air tracking host start", daemon=True)
    thread.start()


def _start_quietly() -> None:
    try:
        start_host()
    except Exception:  # noqa: BLE001 - the call tries again, and says what is wrong
        pass
