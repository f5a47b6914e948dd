"""Operating-system processes as the engine starts and stops them, on this machine or on a Ray node.

Everything that starts processes uses these: the rank server (which forks ranks), the caller's side of it, the Ray
rank host (which starts its rank as a child process), and ``air run``'s supervisor.

* **Process groups.** Every rank leads a session of its own, so :func:`kill_group` reaches everything it started
  (DataLoader workers, compiler helpers, a ``ray start`` node). Not to be confused with torch's process groups
  (:mod:`databricks.air._engine.process_groups`).
* **Parent death.** :func:`set_parent_death_signal` asks Linux to kill a process when its parent dies, even by
  SIGKILL; :func:`die_with_parent` also closes the race with a parent that died first.
* **Ports and listeners.** :func:`listen` opens every TCP listener of ours, on the address asked for (loopback,
  :data:`LOOPBACK`, unless the user named another); :func:`free_port` picks a TCP port that is free now.
* **Fresh interpreters.** :func:`python_command` is the command line of a new interpreter that runs one of the
  engine's entry points (the rank server, a rank), without the working directory on ``sys.path``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
from typing import List, Optional, Sequence

DROP_SCRIPT_DIRECTORY = "sys.path.pop(0)"
"""Python source that drops the entry ``python -c`` puts first on ``sys.path``: the working directory.

A user's file there named like a module torch imports (``concurrent.py``, say) would otherwise be imported, and
run, by the rank server while it preloads torch. Ranks apply the caller's own ``sys.path`` later, as the caller has
it.
"""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def kill_group(pgid: int, sig: int) -> None:
    """Signal a process group; one that is already gone (or never was ours) is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere).

    Linux means the parent *thread*: a process started by a thread that ends gets ``sig`` then.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its children (Linux ``PR_SET_CHILD_SUBREAPER``); False where
    that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """:func:`set_parent_death_signal`, then exit at once if ``parent_pid`` died before the request was made."""
    set_parent_death_signal(sig)
    if os.getppid() != parent_pid:
        os._exit(1)


LOOPBACK = "127.0.0.1"
"""Where our listeners listen unless the user names another address (``MASTER_ADDR``, a Ray address)."""


def listen(host: str, port: int = 0, backlog: int = 128) -> socket.socket:
    """A TCP socket listening on ``host:port`` only (``port`` 0: one the kernel picks), never on every address.

    ``host`` is an address or a name (resolved here; a name that resolves to several addresses takes the first that
    can be bound). Raises :class:`OSError` naming the address when none can be bound. Torch's ``TCPStore`` takes
    the socket through ``master_listen_fd``: left to itself it listens on every interface, whatever its host.
    """
    errors = []
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        server = socket.socket(family, kind, proto)
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(address)
            server.listen(backlog)
            return server
        except OSError as error:
            server.close()
            errors.append((address[0], error.strerror or str(error)))
    if len(errors) == 1:
        why = errors[0][1]
    else:
        why = "; ".join(f"{where}: {what}" for where, what in errors) or "the name resolves to no address"
    raise OSError(f"cannot listen on {host}:{port}: {why}")


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that nothing listens on at ``host`` now (``""``: every address of this machine).

    Whoever uses it binds it moments later; a process that binds it first in between makes that bind fail, so
    prefer letting the listener pick its own port (port 0) where it can.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def python_command(module: str, arguments: Sequence[str] = (), *, parent_pid: Optional[int] = None) -> List[str]:
    """The command line of a fresh interpreter that runs ``module.main()`` with ``arguments`` in ``sys.argv[1:]``.

    Output is unbuffered (``-u``) and the working directory is not on ``sys.path`` (:data:`DROP_SCRIPT_DIRECTORY`).
    With ``parent_pid`` the interpreter first asks to die with that parent (:func:`die_with_parent`), before it
    imports anything heavy. Example::

        subprocess.Popen(python_command("databricks.air._engine.rank", [call_dir, "0"], parent_pid=os.getpid()))
    """
    steps = ["import sys", DROP_SCRIPT_DIRECTORY]
    if parent_pid is not None:
        steps.append(f"from {__name__} import die_with_parent; die_with_parent({int(parent_pid)})")
    steps.append(f"from {module} import main; main()")
    return [sys.executable, "-u", "-c", "; ".join(steps), *arguments]
