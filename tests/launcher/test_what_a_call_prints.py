"""What a user reads: a call's own lines, each fact once, no library chatter, tracebacks of the user's code only.

Each test runs a script in a fresh interpreter with its output going to pipes (as in a CI log or ``> out.txt``), and
reads every line it printed.
"""

from __future__ import annotations

import re
from typing import List

import pytest

TWO_CALLS = """
    import mlflow
    from databricks.air import distributed

    @distributed(accelerator_type="CPU", num_accelerators=2)
    def hello():
        import os
        print(f"hi from rank {os.environ['RANK']}")
        return 1

    for _ in range(2):
        @distributed(accelerator_type="CPU", num_accelerators=2)  # a notebook cell run again
        def hello():
            import os
            print(f"hi from rank {os.environ['RANK']}")
            return 1
        assert hello.distributed() == [1, 1]
"""

FAILS = """
    from databricks.air import distributed

    def inner(x):
        raise ValueError(f"boom {x}")

    @distributed(accelerator_type="CPU", num_accelerators=2, timeout=60)
    def fails():
        import os, time
        print("starting")
        if os.environ["RANK"] == "{rank}":
            inner(1)
        time.sleep(30)

    fails.distributed()
"""


def _ours(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.startswith("databricks.air")]


@pytest.fixture
def tracked(tmp_path, monkeypatch: pytest.MonkeyPatch) -> dict:
    env = {
        "DATABRICKS_AIR_MLFLOW": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs"),
    }
    for name in (
        "MLFLOW_EXPERIMENT_NAME",
        "MLFLOW_EXPERIMENT_ID",
        "MLFLOW_RUN_ID",
        "DATABRICKS_AIR_DEBUG",
        "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED",
        "MLFLOW_LOGGING_LEVEL",
    ):
        monkeypatch.delenv(name, raising=False)
    return env


@pytest.mark.slow
def test_a_tracked_call_prints_three_lines_of_its_own_and_no_mlflow_info(run_script, tracked: dict) -> None:
    # The first call creates the SQLite store (MLflow's "Creating initial MLflow database tables...") and runs the
    # system metrics monitor (its "Started monitoring..."): none of that shows; notes are given once per process.
    done = run_script(TWO_CALLS, env=tracked, timeout=240)
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "INFO" not in printed and "mlflow.store.db.utils" not in printed and "system_metrics" not in printed
    ours = _ours(printed)
    assert ours[0] == "databricks.air is in Beta: its API may still change between releases."
    calls = ours[1:]
    assert len(calls) == 6, ours  # three a call: where it runs, the run, how it ended
    for first, run, last in (calls[:3], calls[3:]):
        assert re.fullmatch(
            r"databricks\.air: running hello on 2 CPU rank\(s\); logs: \S+ "
            r"\(kept: newest 50 calls, 7 days\)",
            first,
        ), first
        assert run.startswith("databricks.air: MLflow run hello (")
        assert re.fullmatch(r"databricks\.air: hello finished in \d+\.\d s", last), last
    assert printed.count("default timeout of 10800 s") == 1
    assert printed.count("hi from rank 0") == 2 and "hi from rank 1" not in printed


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_failure_says_its_message_and_its_traceback_once(
    run_script, tmp_path, rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABRICKS_AIR_DEBUG", raising=False)
    done = run_script(
        FAILS.replace("{rank}", str(rank)),
        env={"DATABRICKS_AIR_MLFLOW": "0", "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs")},
    )
    assert done.returncode == 1
    printed = done.stdout + done.stderr
    assert printed.count("boom 1") == 1, printed  # the headline; the traceback's own last line is not repeated
    assert printed.count('raise ValueError(f"boom {x}")') == 1, printed
    assert printed.count("in inner") == 1
    assert "<dynamic-code>" not in printed
    assert f"ValueError: fails: rank {rank} of 2 raised ValueError: boom 1" in printed
    assert "Ranks:\n" in printed and "failed first (root cause)" in printed
    # The caller's traceback holds the user's frames, and of this package only the line that re-raises.
    caller_frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', printed.split("Traceback from rank")[0])
    assert [name for _, name in caller_frames] == ["<module>", "distributed"], caller_frames
    assert re.search(r"databricks\.air: fails failed after \d+\.\d s", printed)
    if rank == 1:  # not shown live: the report has the last lines of its output
        assert "Last 50 lines of rank 1's output" in printed and printed.count("starting") == 2
    else:  # rank 0's output was just seen live
        assert "Last 50 lines" not in printed and printed.count("starting") == 1
    log = next((tmp_path / "logs").glob("*-fails-*")) / f"rank_{rank}.txt"
    assert log.read_text().rstrip().endswith("ValueError: boom 1")  # the log file keeps the whole traceback


def test_debug_keeps_the_package_frames(run_script, tmp_path) -> None:
    done = run_script(
        FAILS.replace("{rank}", "0"),
        env={
            "DATABRICKS_AIR_MLFLOW": "0",
            "DATABRICKS_AIR_DEBUG": "1",
            "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs"),
        },
    )
    assert done.returncode == 1
    assert "databricks_air/_engine/failures.py" in done.stderr and "in results_or_error" in done.stderr


def test_an_interrupt_while_the_store_is_made_is_one_clean_line(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C during the seconds MLflow takes to create a SQLite store's tables used to end in a 40-frame SQLAlchemy
    # traceback. It ends in one line that says what was interrupted, with none of the library's frames.
    import traceback

    import mlflow

    from databricks.air import distributed

    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("DATABRICKS_AIR_DEBUG", raising=False)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mlflow, "MlflowClient", interrupted)
    call = distributed(accelerator_type="CPU", num_accelerators=2, timeout=60)(lambda: 1)
    with pytest.raises(KeyboardInterrupt) as caught:
        call.distributed()
    assert str(caught.value).startswith("interrupted while opening the MLflow run in sqlite:///")
    assert caught.value.__suppress_context__
    shown = "".join(traceback.format_exception(caught.value))
    assert "mlflow" not in shown.replace(str(caught.value), "") and "call_run.py" not in shown
    assert call.last_log_dir is None  # no rank was started


def test_a_return_value_that_cannot_be_pickled_is_said_once_and_kept_in_the_log(run_script, tmp_path) -> None:
    done = run_script(
        """
        import threading
        from databricks.air import distributed

        @distributed(accelerator_type="CPU", num_accelerators=2, timeout=60)
        def returns_a_lock():
            return threading.Lock()

        returns_a_lock.distributed()
        """,
        env={"DATABRICKS_AIR_MLFLOW": "0", "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs")},
    )
    assert done.returncode == 1
    printed = done.stdout + done.stderr
    assert printed.count("cannot pickle '_thread.lock' object") == 1, printed  # the report's headline only
    assert "SerializationError: returns_a_lock: the return value of rank " in printed
    log = next((tmp_path / "logs").glob("*-returns_a_lock-*")) / "rank_0.txt"
    assert "the return value of rank 0 (a _thread.lock) cannot be pickled" in log.read_text()


@pytest.mark.parametrize(
    "variable, value",
    [("DATABRICKS_AIR_START_METHOD", "forkserver"), ("MASTER_PORT", "http"), ("DATABRICKS_AIR_STALL_SECONDS", "soon")],
)
@pytest.mark.slow
def test_a_bad_setting_is_the_only_thing_said(run_script, tracked: dict, tmp_path, variable: str, value: str) -> None:
    # Before anything is printed, made or recorded: no "running ... on 2 CPU rank(s)", no "failed after", no log
    # folder, no MLflow run for a call that never started.
    done = run_script(TWO_CALLS, env={**tracked, variable: value})
    assert done.returncode == 1
    printed = done.stdout + done.stderr
    assert f"RuntimeConfigurationError: {variable} must be " in printed and "; unset it " in printed
    assert [line for line in printed.splitlines() if line.startswith("databricks.air: ")] == [], printed
    assert not (tmp_path / "logs").exists()
    assert not (tmp_path / "mlflow.db").exists()


UNPICKLABLE_ARGUMENT = """
    import threading
    from databricks.air import distributed

    @distributed(accelerator_type="CPU", num_accelerators=2)
    def count(lock):
        return 1

    count.distributed(threading.Lock())
"""


@pytest.mark.parametrize("case", ["log dir is a file", "keep calls", "unpicklable argument"])
def test_nothing_is_made_or_recorded_before_the_settings_and_the_payload_are_checked(
    run_script, tracked: dict, tmp_path, case: str
) -> None:
    # A log folder that is a file, a bad count of folders to keep, an argument that cannot be pickled: each used to
    # be found after the call's MLflow run was made (and ended FAILED) and the store created.
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    env, script, says = dict(tracked), TWO_CALLS, ""
    if case == "log dir is a file":
        env["DATABRICKS_AIR_LOG_DIR"] = str(a_file)
        says = (
            f"RuntimeConfigurationError: call logs cannot be kept in DATABRICKS_AIR_LOG_DIR='{a_file}': {a_file} "
            "is a file, not a folder; point DATABRICKS_AIR_LOG_DIR at a folder you can write, or unset it"
        )
    elif case == "keep calls":
        env["DATABRICKS_AIR_LOG_KEEP_CALLS"] = "abc"
        says = "RuntimeConfigurationError: DATABRICKS_AIR_LOG_KEEP_CALLS must be a whole number >= 0"
    else:
        script = UNPICKLABLE_ARGUMENT
        says = "SerializationError: cannot ship the arguments of function 'count' to the ranks: argument 'lock'"
    done = run_script(script, env=env)
    assert done.returncode == 1
    printed = done.stdout + done.stderr
    assert says in printed, printed
    assert [line for line in printed.splitlines() if line.startswith("databricks.air: ")] == [], printed
    assert not (tmp_path / "logs").exists()
    assert not (tmp_path / "mlflow.db").exists()
