"""The first tracked call of a process (issue 33): MLflow's import and the store begin ahead (at decoration; in a
notebook after the importing cell), the call's timeout and clock cover its set-up, and other threads' imports
meanwhile are safe.

Tracked tests use the ``store`` fixture (a SQLite store of their own); a store "that never answers" is an HTTP
tracking URI on a loopback socket that accepts connections and never replies, or a SQLite file another connection
holds an exclusive lock on.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from mlflow_fixtures import store  # noqa: F401 - fixture
from process_helpers import wait_until
from databricks.air import distributed
from databricks.air._tracking import warmup
from databricks.air._engine import rank_server_handle
from databricks.air._variables import BETA_NOTICE_SHOWN
from databricks.air.exceptions import LocalExecutionTimeoutError

GRACE = 3.0  # the default grace period, which a timed-out call may take on top of its timeout


def ranks() -> int:
    return int(os.environ["RANK"])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An ``http://`` tracking URI whose server accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def hold_lock(database: str, seconds: float) -> threading.Thread:
    """Hold an exclusive lock on a SQLite file for ``seconds`` (from another connection, in a thread); returns once
    the lock is held."""
    held = threading.Event()

    def hold() -> None:
        connection = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        connection.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        connection.execute("COMMIT")
        connection.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(10)
    return thread


def make_store(uri: str) -> None:
    """Make the store and its tables (a call's set-up then only opens it)."""
    import mlflow

    mlflow.MlflowClient(uri).search_experiments(max_results=1)


def clean_env(**extra: str) -> dict:
    """The environment of a fresh interpreter that is a user's first process of this package."""
    env = {key: value for key, value in os.environ.items() if key != BETA_NOTICE_SHOWN}
    env.update(extra)
    return env


# --- the timeout and the clock cover the set-up --------------------------------------------------------------------


@pytest.mark.slow
def test_a_store_that_never_answers_fails_the_call_within_its_timeout(
    store: str, silent_server: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", silent_server)
    mlflow.set_tracking_uri(silent_server)
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=2)(ranks)
    assert warmup.wait(None)  # MLflow's import (begun at decoration) is over: what is left is the store
    began = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError) as raised:
        fn.distributed()
    took = time.monotonic() - began
    assert took < 2 + GRACE, took  # the health check (5 s on its own) counts toward the timeout
    message = str(raised.value)
    assert f"the MLflow store at {silent_server} did not answer within" in message, message
    assert "its timeout of 2 s" in message and "no rank was started" in message
    assert "running ranks" not in capfd.readouterr().err  # no rank started, no log folder made
    assert fn.last_log_dir is None


@pytest.mark.slow
def test_a_first_call_in_a_fresh_process_times_out_within_its_timeout(
    silent_server: str, run_script: Callable[..., subprocess.CompletedProcess], tmp_path: Path
) -> None:
    done = run_script(
        """
        import json, time
        from databricks.air import distributed
        from databricks.air.exceptions import LocalExecutionTimeoutError

        @distributed(num_accelerators=2, accelerator_type="CPU", timeout=3)
        def ranks():
            return 0

        began = time.monotonic()
        try:
            ranks.distributed()
        except LocalExecutionTimeoutError as error:
            print(json.dumps({"took": time.monotonic() - began, "message": str(error)}))
        """,
        env=clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=silent_server),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["took"] < 3 + GRACE, result
    # what it waited for: MLflow's import (begun at decoration) on a loaded machine, else the store
    assert re.search(
        rf"(the MLflow store at {silent_server} did not answer|MLflow's import did not end) within", result["message"]
    ), result


@pytest.mark.slow
def test_a_run_made_after_its_call_timed_out_is_ended_failed(store: str) -> None:
    import mlflow

    make_store(store)
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=1.5)(ranks)
    assert warmup.wait(None)  # the warm-up (begun at decoration) has opened the store before it is locked
    database = store[len("sqlite:///") :]
    holder = hold_lock(database, 4.0)
    began = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError, match=r"the MLflow store at sqlite:///.* did not answer within"):
        fn.distributed()
    assert time.monotonic() - began < 1.5 + GRACE
    holder.join()
    client = mlflow.MlflowClient(store)

    def ended() -> bool:
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
        return bool(runs) and all(run.info.status != "RUNNING" for run in runs)

    assert wait_until(ended, 30, interval=0.2)  # the late run is not left RUNNING
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED"  # as a call that times out ends its run
    assert "stopped waiting for its MLflow run (its timeout passed)" in run.data.tags["databricks.air.failure"]


@pytest.mark.slow
def test_the_closing_line_and_the_duration_cover_the_set_up(store: str, capfd: pytest.CaptureFixture) -> None:
    import mlflow

    make_store(store)
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)(ranks)
    assert warmup.wait(None)
    hold_lock(store[len("sqlite:///") :], 2.0)  # the store answers 2 s late
    began = time.monotonic()
    assert fn.distributed() == [0, 1]
    took = time.monotonic() - began
    (line,) = [line for line in capfd.readouterr().err.splitlines() if " finished in " in line]
    shown = float(re.search(r"finished in ([0-9.]+) s", line).group(1))
    assert 2.0 <= shown and abs(shown - took) < 0.3, (line, took)
    client = mlflow.MlflowClient(store)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.data.metrics["duration_seconds"] >= 2.0


@pytest.mark.slow
def test_the_timeout_counts_from_the_call_so_slow_set_up_leaves_the_ranks_less(store: str) -> None:
    make_store(store)

    def sleeper() -> None:
        time.sleep(30)

    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=4)(sleeper)
    assert warmup.wait(None)
    hold_lock(store[len("sqlite:///") :], 2.0)
    began = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError, match="did not finish within its timeout of 4 s"):
        fn.distributed()
    assert time.monotonic() - began < 4 + GRACE  # not 2 s of set-up + 4 s for the ranks


@pytest.mark.slow
def test_a_rank_server_not_ready_within_the_timeout_fails_the_call_in_time_and_serves_the_next() -> None:
    rank_server_handle.pool.close_all()  # the call starts a server: a new interpreter that imports torch (> 0.3 s)
    started = rank_server_handle.pool.servers_started
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=0.3)(ranks)
    began = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError, match="the rank server .* was not ready yet, so no rank was"):
        fn.distributed()
    assert time.monotonic() - began < 0.3 + GRACE
    assert fn.with_overrides(timeout=120).distributed() == [0, 1]
    assert rank_server_handle.pool.servers_started == started + 1  # the same server, once ready


# --- the rank server starts the first call's ranks before it imports MLflow ----------------------------------------


@pytest.mark.slow
def test_the_first_calls_ranks_are_not_held_back_by_the_servers_mlflow_import(store: str) -> None:
    make_store(store)
    rank_server_handle.pool.close_all()  # a fresh server, started for this call

    def mlflow_loaded() -> bool:
        return "mlflow" in sys.modules

    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)(mlflow_loaded)
    assert warmup.wait(None)
    hold_lock(store[len("sqlite:///") :], 2.0)  # the caller makes its run while the server is idle for 2 s
    assert fn.distributed() == [False, False]  # the server did not use that time to import MLflow first
    assert fn.distributed() == [True, True]  # it did once the first call's ranks had ended


# --- the warm-up ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_decoration_imports_mlflow_and_opens_an_existing_store_in_the_background(
    run_script: Callable[..., subprocess.CompletedProcess], tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    make_store(uri)
    done = run_script(
        """
        import sys
        from databricks.air import distributed
        from databricks.air._tracking import warmup

        before = "mlflow" in sys.modules
        @distributed(num_accelerators=1, accelerator_type="CPU")
        def f():
            return 0

        started = warmup._thread is not None
        assert warmup.wait(None)
        print(before, started, "mlflow.store.tracking.sqlalchemy_store" in sys.modules,
              sorted(warmup._stores_ready))
        """,
        env=clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=uri),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == f"False True True ['{uri}']"


@pytest.mark.slow
def test_a_store_that_does_not_exist_is_not_made_ahead(
    run_script: Callable[..., subprocess.CompletedProcess], tmp_path: Path
) -> None:
    done = run_script(
        """
        from databricks.air import distributed
        from databricks.air._tracking import warmup

        distributed(num_accelerators=1, accelerator_type="CPU")(print)
        assert warmup.wait(None)
        """,
        env=clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'new.db'}"),
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("env", [{"DATABRICKS_AIR_MLFLOW": "0"}, {"DATABRICKS_AIR_MLFLOW": "1", "RANK": "0"}])
def test_no_warm_up_with_tracking_off_or_in_a_rank(
    env: dict, run_script: Callable[..., subprocess.CompletedProcess]
) -> None:
    done = run_script(
        """
        import sys, time
        from databricks.air import distributed
        from databricks.air._tracking import warmup

        distributed(num_accelerators=1, accelerator_type="CPU")(print)
        time.sleep(0.5)
        print(warmup._thread is None, "mlflow" in sys.modules)
        """,
        env=clean_env(**env),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "True False"


def test_importing_in_a_repl_starts_it_and_in_a_script_does_not(tmp_path: Path) -> None:
    probe = (
        "import databricks.air, sys; from databricks.air._tracking import warmup as w; print(w._thread is not None)\n"
    )
    env = clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    repl = subprocess.run(
        [sys.executable, "-i", "-q"], input=probe, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    script = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60
    )
    assert repl.stdout.strip() == "True", repl.stderr
    assert script.stdout.strip() == "False", script.stderr


@pytest.mark.slow
def test_in_a_jupyter_kernel_it_starts_once_the_importing_cell_has_ended(tmp_path: Path) -> None:
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    root = tmp_path / "kernels"
    (root / "python3").mkdir(parents=True)
    (root / "python3" / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3",
                "language": "python",
            }
        )
    )
    env = clean_env(
        DATABRICKS_AIR_MLFLOW="1",
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        IPYTHONDIR=str(tmp_path / "ipython"),
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    manager = KernelManager(
        kernel_name="python3",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(root)], ensure_native_kernel=False),
    )
    manager.start_kernel(cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = manager.client()
    client.start_channels()
    outputs: List[str] = []

    def keep(message: Any) -> None:
        if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
            outputs.append(message["content"]["text"])

    try:
        client.wait_for_ready(timeout=120)
        for cell in (
            "import sys\nimport databricks.air\nfrom databricks.air._tracking import warmup as w\n"
            "print(w._thread is None, 'mlflow' in sys.modules)",
            "print(w._thread is not None, w.wait(None), 'mlflow.tracking.fluent' in sys.modules)",
        ):
            reply = client.execute_interactive(textwrap.dedent(cell), timeout=120, output_hook=keep)
            assert reply["content"]["status"] == "ok", outputs
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "".join(outputs).split() == ["True", "False", "True", "True", "True"]


# --- other threads' imports, and forks, meanwhile ------------------------------------------------------------------

CONCURRENT_IMPORTS = [
    "from mlflow.tracking import MlflowClient",
    "import mlflow.tracking.fluent",
    "from mlflow.entities import Metric",
    "from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore",
    "import mlflow; mlflow.set_experiment",
    "from sqlalchemy.orm import Session",
]


@pytest.mark.slow
@pytest.mark.parametrize("statement", CONCURRENT_IMPORTS)
def test_the_main_threads_imports_during_the_warm_up_succeed(statement: str, tmp_path: Path) -> None:
    """Without the guard, most of these failed ("cannot import name ... from partially initialized module")."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from databricks.air._tracking import warmup
        warmup.start(open_store=False)
        time.sleep(float(sys.argv[1]))
        {statement}
        print("ok")
        """
    )
    env = clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    # Each in a fresh interpreter of its own, at once: both cores work. At 0 s the two imports start together, at
    # 0.2 s this one meets MLflow half imported (each interpreter imports MLflow: seconds of CPU time).
    delays = ("0", "0.2")
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, delay], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for delay in delays
    ]
    for delay, process in zip(delays, processes):
        out, err = process.communicate(timeout=120)
        assert out.strip() == "ok", (delay, err[-2000:])


@pytest.mark.slow
def test_a_fork_during_the_warm_up_waits_for_it_so_the_child_can_import_mlflow(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import os, sys, time
        from databricks.air._tracking import warmup
        warmup.start(open_store=False)
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:
            import mlflow.tracking.fluent
            os._exit(0)
        print(os.waitpid(pid, 0)[1])
        """
    )
    env = clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.stdout.strip() == "0", done.stderr[-2000:]


@pytest.mark.slow
def test_the_guard_is_gone_once_the_imports_are_over(
    run_script: Callable[..., subprocess.CompletedProcess], tmp_path: Path
) -> None:
    done = run_script(
        """
        import builtins
        original = builtins.__import__
        from databricks.air._tracking import warmup
        warmup.start(open_store=False)
        guarded = builtins.__import__ is not original
        warmup.wait(None)
        print(guarded, builtins.__import__ is original)
        """,
        env=clean_env(DATABRICKS_AIR_MLFLOW="1", MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "True True"


def test_active_run_id_is_none_while_mlflow_is_half_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air._tracking import call_run

    class Half:
        class __spec__:
            _initializing = True

    monkeypatch.setitem(sys.modules, "mlflow.tracking.fluent", Half())
    assert call_run.active_run_id() is None


def test_the_warm_up_is_not_started_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    warmup.start()
    assert warmup.wait(None)
    first = warmup._thread
    warmup.start()
    warmup.start(open_store=False)
    assert warmup._thread is first


def test_the_data_loaders_run_lookup_passes_over_a_half_imported_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from databricks.air.data import metrics

    half = types.ModuleType("mlflow")
    half.__spec__ = types.SimpleNamespace(_initializing=True)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "mlflow", half)
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    assert metrics.mlflow_sink() is None  # not an AttributeError from the module the warm-up is making


def test_importing_from_the_standard_library_leaves_sys_path_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``asynchronous`` imports ``concurrent.futures`` past a user's ``concurrent.py`` while the warm-up may import
    MLflow on another thread: ``sys.path`` must stay whole meanwhile (it once held only the standard library, and
    the warm-up failed with "No module named 'pydantic'")."""
    from databricks.air import asynchronous

    seen: List[List[str]] = []
    original = asynchronous.importlib.import_module

    def spy(name: str, package: Any = None) -> Any:
        seen.append(list(sys.path))
        return original(name, package)

    monkeypatch.setattr(asynchronous.importlib, "import_module", spy)
    monkeypatch.delitem(sys.modules, "concurrent.futures.process", raising=False)
    asynchronous._from_the_standard_library("concurrent.futures.process")
    assert seen == [list(sys.path)]
