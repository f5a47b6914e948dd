"""What a rank offers the launcher when it needs to know where the rank is: its stacks and its collectives.

Installed in every rank before the user's function runs (:func:`install`), at a cost of one idle thread:

* **Stacks on a signal.** ``faulthandler`` writes the Python stack of every thread to the rank's stack file when
  the rank receives :data:`STACK_SIGNAL`. Its handler is C code that needs no GIL, so it answers from a rank blocked
  inside a C++ collective and from one spinning in C with the GIL held alike. ``SIGWINCH`` is ignored by default,
  so a signal that arrives before the handler is installed does no harm; ranks have no terminal that would send
  it for real. The launcher sends it only to a rank whose probe does not answer: the dump walks the threads
  without the GIL and crashes the rank if one starts or ends meanwhile (see :mod:`~databricks.air._engine.snapshot`).
* **Collectives and richer stacks on request.** A daemon thread serves one request per connection on a Unix
  socket: it answers with the position of every process group in its collectives (torch's flight recorder:
  ``pg_status`` and the entries not yet completed) and the stack of every thread with source lines. It needs the
  GIL, so a rank that holds it does not answer; the stack file still tells where it is.
* **When it issued its collectives**, for the straggler watch: ``times {since}`` answers with the flight recorder's
  issue time of every collective after ``since`` and the rank's wait for data (:mod:`.issue_times`).

The caller side is :mod:`databricks.air._engine.snapshot`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Dict, Iterator, List, Mapping, Optional

from databricks.air import _variables
from databricks.air._engine import issue_times

STACK_SIGNAL = signal.SIGWINCH
"""The signal on which a rank writes its stacks (see the module docstring for why this one)."""

STACK_FILE_HEADER = "# databricks.air: main thread {ident:#018x}\n"

REQUEST_BYTES = 4096
"""The most a request may hold (one read): ``times`` with the last sequence number seen per group."""
_kept: List[Any] = []  # the open stack file and the server: alive as long as the rank


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the call (whose variables are ``environ``) may look at its ranks: not when the snapshot, the stall
    watch and the straggler watch are all turned off (``0``)."""
    return not all(
        _zero(environ.get(name, ""))
        for name in (_variables.SNAPSHOT_SECONDS, _variables.STALL_SECONDS, _variables.STRAGGLER_SECONDS)
    )


def _zero(value: str) -> bool:
    try:
        return float(value) <= 0
    except ValueError:
        return False


def install(stack_path: str, socket_path: str) -> None:
    """Register the stack dump on :data:`STACK_SIGNAL` and start serving requests on ``socket_path``.

    Never fails the rank: a part that cannot be set up is left out, and a snapshot names what is missing.
    """
    try:
        stream = open(stack_path, "ab", buffering=0)  # faulthandler writes to the descriptor until the rank ends
        if stream.tell() == 0:  # faulthandler's dump names threads by id only: say which one is the main thread
            stream.write(STACK_FILE_HEADER.format(ident=threading.main_thread().ident).encode())
        faulthandler.register(STACK_SIGNAL, file=stream, all_threads=True, chain=False)
        _kept.append(stream)
    except (OSError, RuntimeError, ValueError):
        pass
    try:
        try:
            os.unlink(socket_path)  # left by an earlier rank of the same number (Ray reuses its folders)
        except FileNotFoundError:
            pass
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with socket_address(socket_path) as address:
            server.bind(address)
        server.listen(4)
    except OSError:
        return
    _kept.append(server)
    threading.Thread(target=_serve, args=(server,), name="databricks.air probe", daemon=True).start()


@contextlib.contextmanager
def socket_address(path: str) -> Iterator[str]:
    """``path`` as a Unix socket address: itself, or, past the 107 bytes an address may hold (a long TMPDIR), the
    same file reached through ``/proc/self/fd`` and a descriptor of its folder, held open meanwhile."""
    if len(os.fsencode(path)) < 100:
        yield path
        return
    folder = os.open(os.path.dirname(path) or ".", os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)


def _serve(server: socket.socket) -> None:
    while True:
        try:
            connection, _ = server.accept()
        except OSError:
            return
        with connection:
            try:
                request = connection.recv(REQUEST_BYTES).decode(errors="replace").strip()
                connection.sendall(json.dumps(answer(request)).encode())
            except OSError:
                pass  # the caller gave up waiting


def answer(request: str) -> Dict[str, Any]:
    """The probe's answer: ``collectives`` always; ``threads`` too unless ``request`` is ``"collectives"``; for
    ``times {since}``, only when each collective after ``since`` was issued (:mod:`.issue_times`)."""
    if request.startswith("times"):
        return {"time": time.time(), **issue_times.read(issue_times.parse_request(request[len("times") :]))}
    reply: Dict[str, Any] = {"time": time.time(), "collectives": collective_positions()}
    if request != "collectives":
        reply["threads"] = thread_stacks()
    return reply


def collective_positions(entries: bool = True) -> Dict[str, Any]:
    """Every process group's place in its collectives, from torch's flight recorder; without ``entries``, only the
    counts (no ``active`` entries, no ``last_op``): microseconds, where a full recorder takes tens of milliseconds.

    ``{"groups": {id: {"name", "enqueued", "completed", "active": [entry...], "last_op"}}}``, or
    ``{"unavailable": reason}``. An entry is ``{"seq", "op", "sizes", "since"}`` (``since``: when it was issued,
    ``time.time()`` scale); ``last_op`` names the last collective issued (``all_reduce``), even once torch has marked
    it completed (a collective that failed is), or ``""`` where the recorder no longer holds it.
    """
    c10d = _loaded_c10d()
    if c10d is None:
        return {"groups": {}}  # torch.distributed never imported: no group exists
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        return {"unavailable": "this torch has no flight recorder dump (_dump_fr_trace_json)"}
    try:
        trace = json.loads(dump(includeCollectives=entries, onlyActive=False))
    except Exception as error:  # noqa: BLE001 - never let a probe break the rank
        return {"unavailable": f"the flight recorder dump failed: {type(error).__name__}: {error}"}
    return {"groups": _groups(trace)}


def _loaded_c10d() -> Optional[Any]:
    if "torch.distributed" not in sys.modules:
        return None
    torch_c = sys.modules.get("torch._C")
    return getattr(torch_c, "_distributed_c10d", None)


def _groups(trace: Dict[str, Any]) -> Dict[str, Any]:
    groups: Dict[str, Any] = {}
    for group_id, status in (trace.get("pg_status") or {}).items():
        groups[str(group_id)] = {
            "name": "",
            "enqueued": int(status.get("last_enqueued_collective", -1)),
            "completed": int(status.get("last_completed_collective", -1)),
            "active": [],
            "last_op": "",
        }
    for entry in trace.get("entries") or []:
        group_id, name = (list(entry.get("process_group") or ["", ""]) + ["", ""])[:2]
        group = groups.get(str(group_id))
        if group is None or entry.get("is_p2p"):
            continue
        group["name"] = name
        if int(entry.get("collective_seq_id", -1)) == group["enqueued"]:
            group["last_op"] = str(entry.get("profiling_name", "")).split(":", 1)[-1]
        if int(entry.get("collective_seq_id", -1)) > group["completed"]:
            group["active"].append(
                {
                    "seq": int(entry["collective_seq_id"]),
                    "op": str(entry.get("profiling_name", "")),
                    "sizes": entry.get("input_sizes") or [],
                    "since": int(entry.get("time_created_ns", 0)) / 1e9,
                }
            )
    return groups


def thread_stacks() -> List[Dict[str, Any]]:
    """Every thread's stack, outermost frame first, each frame ``[file, line, function, source]``."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().ident
    me = threading.get_ident()
    stacks = []
    for ident, frame in sys._current_frames().items():
        if ident == me:
            continue  # this probe thread, answering
        frames = [
            [summary.filename, summary.lineno, summary.name, (summary.line or "").strip()]
            for summary in traceback.extract_stack(frame)
        ]
        stacks.append({"name": names.get(ident, f"thread {ident}"), "main": ident == main, "frames": frames})
    stacks.sort(key=lambda stack: not stack["main"])
    return stacks
