"""MLflow imported, and the call's store opened, before the first tracked call needs them.

Importing MLflow's client and its SQLAlchemy store takes 1.5 to 2.5 s on 2 vCPUs (more under load). The first
tracked ``.distributed()`` call of a process used to pay it first thing, before any rank could start. A daemon
thread does it ahead instead, started:

* when a function is decorated with ``@distributed`` (in a script, decorators run right after the imports): MLflow,
  its SQL store module, the modules a call's run uses, and then the store of the tracking URI of that moment,
  opened when it is a SQLite file that exists already (a new store is made by the call, never ahead: a script may
  still choose another one, and an unwanted ``mlflow.db`` would be left in its folder);
* after the cell that imports ``databricks.air`` in a Jupyter or IPython kernel (at once in a plain REPL): the same
  (cells run one by one, so the next ones find it done). Only for the first import of a process tree (the one that
  shows the Beta notice), never in our own commands; ``databricks.air``'s ``__init__`` asks for it.

Never in a rank (``RANK`` set), nor with tracking off (``DATABRICKS_AIR_MLFLOW=0``) or MLflow not installed. The
call waits for it (:func:`wait`) within its deadline, so a call's timeout covers it.

Imports from other threads meanwhile: Python's per-module import locks are not enough. A thread that imports a
submodule of a package this thread is still initializing (``from mlflow.tracking import MlflowClient`` while
``import mlflow`` runs here) takes that submodule's lock, runs it, and meets the package half made: MLflow's
circular imports then fail with "cannot import name ... from partially initialized module" (21 of 50 tries of ten
such imports, 0 to 0.6 s after the start, on MLflow 3.17). So while the imports run here, an ``import`` statement of
another thread that asks for MLflow, or for a module this thread holds the import lock of (or of a package above
it), first waits until they are over (:func:`_guard`), unless that thread is inside an import itself (it might hold
a lock this one needs: Python sorts that out as usual). ``importlib.import_module`` does not pass through there, and
is not guarded.

A process forked meanwhile (``os.fork``: ``multiprocessing``'s default on Linux) would inherit the locks this thread
holds without the thread, and its first MLflow import would hang; so a fork waits for the imports to end first (up
to :data:`FORK_WAIT_SECONDS`). ``subprocess`` does not fork this way and never waits.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from databricks.air import _variables
from databricks.air._switches import switched_off

FORK_WAIT_SECONDS = 30.0
IMPORT_WAIT_SECONDS = 120.0

MODULES = (
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",  # the default store's; MLflow imports it when it first opens one
    "mlflow.store.artifact.local_artifact_repo",  # the run's logs are uploaded there for a local store
    "mlflow.system_metrics.system_metrics_monitor",
)
"""What a tracked call imports in the caller, heaviest first."""
_PACKAGES = {name.partition(".")[0] for name in MODULES}

_lock = threading.Lock()
_thread: Optional[threading.Thread] = None
_busy = False  # a thread works, and will look at _open_store before it ends (both under _lock)
_open_store = False  # asked for by a decoration
_imported = False  # the imports were tried
_store_tried = False
_importing: Optional[int] = None  # the thread that imports, while it does
_imports_over = threading.Event()


def wanted() -> bool:
    """Whether a warm-up is of use in this process: tracking on, not a rank."""
    return not switched_off(_variables.MLFLOW) and "RANK" not in os.environ


def start(open_store: bool = True, hosted: bool = True) -> None:
    """Start the warm-up in the background, unless it is not wanted or has been done; ``open_store``: also open the
    store of the current tracking URI once MLflow is imported (when it is a SQLite file that exists). ``hosted``:
    where this process's calls use the tracking host (:mod:`.host_start`), start that instead (if none runs), and
    import nothing here."""
    global _thread, _open_store, _busy
    if not wanted():
        return
    if hosted:
        from databricks.air._tracking import host_start

        if host_start.preferred():
            host_start.start_host_in_background()
            return
    with _lock:
        _open_store = _open_store or open_store
        if _busy or (_imported and (_store_tried or not _open_store)):
            return  # a thread at work opens the store too, if asked, before it ends
        thread = threading.Thread(target=_warm, name="databricks.air MLflow warm-up", daemon=True)
        guarding = not _imported
        if guarding:  # before the thread runs: an import in this thread right after this call is guarded too
            _install_guard()
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down
            if guarding:
                _remove_guard()
            return
        _thread, _busy = thread, True
        if guarding:
            _set_importer(thread.ident)


def wait(deadline: Optional[float]) -> bool:
    """Wait for the warm-up until ``deadline`` (a ``time.monotonic()`` time; ``None``: as long as it takes); whether
    it is over (or never started)."""
    thread = _thread
    if thread is None or thread is threading.current_thread():
        return True
    thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return not thread.is_alive()


def imported() -> bool:
    """Whether MLflow's import is over (what may still run is the store's opening)."""
    mlflow = sys.modules.get("mlflow")
    return mlflow is not None and not getattr(getattr(mlflow, "__spec__", None), "_initializing", False) and _imported


def _warm() -> None:
    global _imported, _store_tried, _busy
    try:
        if not _imported:
            _import_modules()
    finally:
        _imported = True
        while True:
            with _lock:
                if _store_tried or not _open_store:
                    _busy = False
                    return
                _store_tried = True
            try:
                _open_existing_store()
            except BaseException:  # noqa: BLE001 - the call opens it again, and says what is wrong
                pass


def _import_modules() -> None:
    import importlib
    import importlib.util

    _set_importer(threading.get_ident())
    try:
        if importlib.util.find_spec("mlflow") is None:
            return
        from databricks.air._tracking import quiet

        with quiet.quiet():
            for name in MODULES:
                if name.endswith("sqlalchemy_store") and importlib.util.find_spec("sqlalchemy") is None:
                    continue
                try:
                    importlib.import_module(name)
                except BaseException:  # noqa: BLE001 - the call imports it again, and meets the error there
                    return
    finally:
        _remove_guard()


_guarded: Optional[Callable[..., Any]] = None
_unguarded: Optional[Callable[..., Any]] = None


def _install_guard() -> None:
    """Route ``import`` statements through :func:`_guard` until :func:`_remove_guard`."""
    global _guarded, _unguarded, _importing
    _imports_over.clear()
    _importing = -1  # the importing thread's id comes with it: until then, every thread is another one
    _unguarded = builtins.__import__
    _guarded = _guard(_unguarded)
    builtins.__import__ = _guarded


def _set_importer(ident: Optional[int]) -> None:
    global _importing
    if _guarded is not None and ident is not None:
        _importing = ident


def _remove_guard() -> None:
    global _guarded, _unguarded, _importing
    _importing = None
    _imports_over.set()
    if _guarded is not None and builtins.__import__ is _guarded:  # else wrapped again since: ours passes through
        assert _unguarded is not None  # (set and cleared with _guarded)
        builtins.__import__ = _unguarded
    _guarded = _unguarded = None


def _guard(original: Callable[..., Any]) -> Callable[..., Any]:
    def _guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        importer = _importing
        if importer is not None and level == 0 and threading.get_ident() != importer:
            _wait_if_held(name, fromlist, importer)
        return original(name, globals, locals, fromlist, level)

    return _guarded_import


def _wait_if_held(name: str, fromlist: Any, importer: int) -> None:
    """Wait for the imports to end if this thread holds no import lock (see the module docstring) and asks for
    MLflow, or for a module whose import lock (or a package's above it) ``importer`` holds; ``fromlist`` counts."""
    wanted = [name] + [f"{name}.{item}" for item in (fromlist or ()) if isinstance(item, str) and item != "*"]
    if all(_ready(module) for module in wanted):
        return
    prefixes: set = set()
    for module in wanted:
        parts = module.split(".")
        prefixes.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    import importlib._bootstrap as bootstrap  # the import system's own module locks, by module name

    me = threading.get_ident()
    held_by_importer = False
    for module, reference in list(getattr(bootstrap, "_module_locks", {}).items()):
        lock = reference()
        owner = getattr(lock, "owner", None)
        if owner == me and getattr(lock, "count", 1):
            return  # this thread is inside an import: it may hold what the importer needs
        if owner == importer and module in prefixes:
            held_by_importer = True
    if held_by_importer or any(module.partition(".")[0] in _PACKAGES for module in wanted):
        _imports_over.wait(IMPORT_WAIT_SECONDS)


def _ready(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def sqlite_path(uri: str) -> Optional[str]:
    """The database file of a ``sqlite:///`` URI (absolute), or ``None`` for another store or an in-memory one."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    return os.path.abspath(path)


_stores_ready: set = set()
_stores_lock = threading.Lock()


def make_store_once(mlflow: Any, uri: str) -> None:
    """Open a SQLite store for the first time under a lock that every process of this user shares.

    MLflow makes and migrates a new store's tables when it first opens it; two processes (or threads) doing that at
    once in a fresh folder fail (``duplicate column name: step``, an Alembic version mismatch). The lock is a file
    in the user's private folder named after the database's path; the operating system drops it if its holder
    dies. Other stores (a server, a folder) need none.
    """
    if not uri.startswith("sqlite:///") or uri in _stores_ready:
        return
    import fcntl
    import hashlib

    from databricks.air._engine.user_folder import user_folder
    from databricks.air.exceptions import RuntimeConfigurationError

    database = os.path.abspath(uri[len("sqlite:///") :])
    lock_path = os.path.join(user_folder("stores"), hashlib.sha256(database.encode()).hexdigest()[:32] + ".lock")
    with _stores_lock, open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            mlflow.MlflowClient(uri).search_experiments(max_results=1)  # makes and migrates the tables
        except Exception as error:  # any store failure
            raise RuntimeConfigurationError(
                f"cannot open the MLflow store {uri}: {type(error).__name__}: {error}. Fix the store (or remove "
                f"{database} if it holds nothing you need), or set {_variables.MLFLOW}=0 to run without tracking."
            ) from error
        _stores_ready.add(uri)


def _open_existing_store() -> None:
    """Open the store of the current tracking URI if it is a SQLite file that exists: its engine made, its schema
    checked (MLflow keeps one store per URI, and :func:`make_store_once` notes it open, so the call finds it ready)."""
    import mlflow

    from databricks.air._tracking import quiet

    uri = mlflow.get_tracking_uri()
    path = sqlite_path(uri)
    if path is None or not os.path.isfile(path):
        return
    with quiet.quiet():
        make_store_once(mlflow, uri)


def _wait_before_fork() -> None:
    """Before ``os.fork``: let the imports end, unless this thread is inside an import (see the module docstring)."""
    importer = _importing
    if importer is None or importer == threading.get_ident():
        return
    import importlib._bootstrap as bootstrap

    me = threading.get_ident()
    for reference in list(getattr(bootstrap, "_module_locks", {}).values()):
        lock = reference()
        if getattr(lock, "owner", None) == me and getattr(lock, "count", 1):
            return
    _imports_over.wait(FORK_WAIT_SECONDS)


def _forget_in_child() -> None:
    global _thread, _lock, _busy, _stores_lock, _importing
    _thread, _busy, _importing = None, False, None
    _lock, _stores_lock = threading.Lock(), threading.Lock()


os.register_at_fork(before=_wait_before_fork, after_in_child=_forget_in_child)
