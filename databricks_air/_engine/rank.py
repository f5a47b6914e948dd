"""The code that runs inside each rank process.

A rank is either forked from the rank server (which has torch imported but never touched CUDA) or, with
``DATABRICKS_AIR_START_METHOD=spawn``, a brand-new interpreter running ``python -m databricks.air._engine.rank``.
Either way it starts as a worker of ``torchrun script.py ARGS`` would:

* with the caller's environment (plus its torchrun variables), working directory, ``sys.path`` and ``sys.argv``;
* with every random generator it inherited from the rank server drawn afresh, as a new interpreter's are
  (:func:`reseed_inherited_generators`);
* with the code that came by value from the caller's ``__main__`` keeping its file names and source, its names
  defined in this ``__main__``, and picklable again by ``multiprocessing``
  (:mod:`databricks.air._engine.by_value`).

Then it loads the arguments, calls the function, and writes what it returned (or how it failed), a
:class:`~databricks.air._engine.outcome.RankRecord`, to ``result_<rank>.bin``.

Exit status: 0 after a returned value, 1 after a failure record; after ``sys.exit(code)``, the status a ``torchrun``
worker exits with (``sys.exit(3)``: 3; ``sys.exit("message")``: 1; ``sys.exit()`` or ``sys.exit(0)``: 0, and the
rank counts as returning ``None``, as torchrun counts such a worker as done). A rank that dies before writing its
record is reported by the caller from its exit status alone. Every record carries how far the rank got in its
process groups' collectives, for the caller's report.

Process groups the function destroys stay referenced until the rank exits
(:mod:`databricks.air._engine.process_groups`), so that a model freed after ``destroy_process_group()`` (at the
latest when the function returns) cannot deadlock the rank.
"""

from __future__ import annotations

import atexit
import dataclasses
import faulthandler
import os
import sys
import threading
import types
from typing import Optional

import cloudpickle

from databricks.air._engine import by_value, learned_imports, rank_hooks, rank_probe
from databricks.air._engine.call_files import CallFiles, RankSetup
from databricks.air._engine.outcome import OutcomeKind, RankRecord
from databricks.air._engine.process_groups import keep_destroyed_groups
from databricks.air._engine.values import read_value_file, write_value_file


def apply_setup(files: CallFiles, rank: int, setup: Optional[RankSetup] = None) -> None:
    """Reproduce the caller's environment, working directory, ``sys.path`` and ``sys.argv`` in this process."""
    setup = setup if setup is not None else files.read_setup()
    environ = dict(setup.environ)
    environ.update(setup.rank_environ[rank])
    os.environ.clear()
    os.environ.update(environ)
    sys.path[:] = setup.sys_path
    sys.argv[:] = setup.argv  # argparse, HfArgumentParser, LightningCLI parse what the caller was run with
    os.chdir(setup.cwd)
    _apply_thread_count()
    reseed_inherited_generators()


def _apply_thread_count() -> None:
    # A forked rank inherits OpenMP's thread count from the rank server, which read OMP_NUM_THREADS when torch
    # loaded; apply this call's value explicitly.
    torch = sys.modules.get("torch")
    value = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def reseed_inherited_generators() -> None:
    """Draw every global random generator this process inherited afresh, as a new interpreter draws them.

    A new interpreter seeds Python's ``random`` and numpy's global generator from OS entropy when they are imported,
    and torch's CPU generator from ``/dev/urandom`` when torch loads; each CUDA device's generator is seeded from
    ``std::random_device`` when CUDA is initialised. A rank forked from the rank server inherits the server's
    generators instead, the same in every rank of every call. Python's ``random`` reseeds itself after a fork; the
    others are reseeded here. CUDA's generators do not exist before the rank initialises CUDA (the server never
    does), so they are left to CUDA: ``torch.seed()`` would tie them to the CPU seed, which a new interpreter does
    not. A function that seeds (``torch.manual_seed``...) does so after this, and keeps control.
    """
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.seed()


def _failure(kind: OutcomeKind, error: BaseException, message: Optional[str] = None) -> RankRecord:
    """A failure record whose traceback starts at the user's code."""
    return RankRecord.failed(kind, error, message, frames=_user_frames(error.__traceback__))


def _user_frames(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """The traceback without its leading frames from this module (the user's code starts below them)."""
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


def run_function(files: CallFiles, rank: int) -> int:
    """Load and call the function, write its record; return this rank's exit status."""
    try:
        with open(files.function, "rb") as stream:
            function = cloudpickle.load(stream)
        by_value.define_in_main(function)  # pickle.dumps, torch.save find the caller's classes by name here too
        by_value.pass_on_by_value()  # ...and processes this rank spawns get them by value
        args, kwargs = read_value_file(files.arguments)
        value = function(*args, **kwargs)
    except SystemExit as error:
        status = exit_status(error.code)
        if status == 0:  # torchrun counts a worker that exits 0 as done: so does a rank, its value None
            return _write_returned(None, files, rank)
        record = _failure(OutcomeKind.EXITED, error, f"the function called sys.exit({error.code!r}) before returning")
        write_value_file(_with_collectives(record), files.result(rank))
        return status
    except KeyboardInterrupt as error:
        record = _failure(OutcomeKind.INTERRUPTED, error)
    except BaseException as error:  # noqa: BLE001 - every failure must reach the caller
        record = _failure(OutcomeKind.RAISED, error)  # its traceback: in the caller's report, then in this log
    else:
        return _write_returned(value, files, rank)
    write_value_file(_with_collectives(record), files.result(rank))
    return 1


def _write_returned(value: object, files: CallFiles, rank: int) -> int:
    try:
        write_value_file(_with_collectives(RankRecord.returned(value)), files.result(rank))
        return 0
    except Exception as error:  # noqa: BLE001
        record = _failure(
            OutcomeKind.UNPICKLABLE_RESULT,
            error,
            f"the return value of rank {rank} (a {type(value).__module__}.{type(value).__qualname__}) "
            f"cannot be pickled: {error}",
        )  # said in the caller's report, then appended to this rank's log (failures.keep_tracebacks_in_logs)
    write_value_file(_with_collectives(record), files.result(rank))
    return 1


def exit_status(code: object) -> int:
    """The status an interpreter exits with after ``SystemExit(code)``, as a ``torchrun`` worker would: ``None``
    is 0, a number is itself (modulo 256, as the operating system keeps it), anything else (a message) is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1


def _with_collectives(record: RankRecord) -> RankRecord:
    """The record, with how far the rank got in each process group's collectives (the caller's report tells a rank
    that returned with a collective fewer than a peer that waited for it)."""
    if "torch.distributed" not in sys.modules:
        return record  # no process group can exist: nothing to ask
    try:  # a rank that returned needs only its counts (microseconds; the entries of a full recorder take ~0.1 s)
        positions = rank_probe.collective_positions(entries=record.kind is not OutcomeKind.RETURNED)
    except Exception:  # noqa: BLE001 - a nicety for the report, never a reason to lose the record
        return record
    return dataclasses.replace(record, collectives=positions)


def finish(status: int, report_fd: Optional[int] = None) -> None:
    """End the rank like an interpreter would (threads joined, ``atexit`` run), but never return to the server;
    ``report_fd``: the server's pipe for what this rank imported (``learned_imports``)."""
    try:
        rank_hooks.end()  # before the threads are joined: a hook may still need its background threads
        shutdown_threads = getattr(threading, "_shutdown", None)
        if shutdown_threads is not None and threading.current_thread() is threading.main_thread():
            shutdown_threads()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        learned_imports.report(report_fd)
    finally:
        os._exit(status)


def run(call_dir: str, rank: int, report_fd: Optional[int] = None) -> None:
    """Run one rank to completion and exit the process; ``report_fd``: see :func:`finish`."""
    faulthandler.enable()
    files = CallFiles(call_dir)
    setup: Optional[RankSetup] = None
    try:
        setup = files.read_setup()
        if rank_probe.wanted(setup.environ):  # from the start: unpickling the function may hang
            rank_probe.install(files.stacks(rank), files.probe(rank))
    except BaseException:  # noqa: BLE001 - reported below, where the setup is read again
        setup = None
    # Before anything can import torch.distributed (unpickling the function may): a model that outlives
    # destroy_process_group() must not deadlock the rank when it is freed (see process_groups).
    keep_destroyed_groups()
    status = 1
    try:
        apply_setup(files, rank, setup)
        rank_hooks.start()
        status = run_function(files, rank)
    except BaseException as error:  # noqa: BLE001 - setup failed: report it like a raised exception
        record = _failure(OutcomeKind.RAISED, error)
        write_value_file(record, files.result(rank))
    finish(status, report_fd)


def main() -> None:
    """Entry point of a fresh interpreter: ``python -c "...; main()" <call dir> <rank>`` (see ``python_command``)."""
    run(sys.argv[1], int(sys.argv[2]))


if __name__ == "__main__":
    main()
