"""When ranks fail: the exception the caller gets, how fast, and what it says."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from databricks.air import distributed
from databricks.air.exceptions import DistributedExecutionError, RankExitError, SerializationError

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def fails_on_rank_one(lines: int = 60) -> str:
    rank = int(os.environ["RANK"])
    if rank == 1:
        for index in range(lines):
            print(f"rank one line {index}")
        raise ValueError("boom from rank 1")
    return "ok"


@pytest.mark.slow
def test_a_rank_exception_is_caught_as_its_own_class_and_as_runtime_error() -> None:
    with pytest.raises(ValueError) as caught:
        cpu2(fails_on_rank_one).distributed()
    error = caught.value
    assert isinstance(error, RuntimeError) and isinstance(error, DistributedExecutionError)
    assert error.args == ("boom from rank 1",)
    assert error.rank == 1
    assert set(error.failures) == {1}
    assert isinstance(error.failures[1], ValueError) and str(error.failures[1]) == "boom from rank 1"
    assert set(error.exit_codes) == {0, 1} and error.exit_codes[1] == 1
    assert 'raise ValueError("boom from rank 1")' in error.remote_traceback


def test_the_message_names_the_rank_and_shows_traceback_and_output_tail() -> None:
    with pytest.raises(RuntimeError) as caught:
        cpu2(fails_on_rank_one).distributed()
    message = str(caught.value)
    assert "rank 1 of 2 raised ValueError: boom from rank 1" in message
    assert (
        "Traceback from rank 1 (most recent call last):" in message
        and 'raise ValueError("boom from rank 1")' in message
    )
    assert "Last 50 lines of rank 1's output" in message
    assert "rank one line 59" in message and "rank one line 20\n" in message
    assert "rank one line 5\n" not in message  # only the last 50 lines
    assert "_engine/rank.py" not in message  # the launcher's own frames are left out
    assert "rank 1: failed first (root cause), exit code 1" in message
    assert str(caught.value.log_dir) in message


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(code, detail)
        self.code = code


def test_custom_exception_classes_with_their_attributes() -> None:
    def fail() -> None:
        raise NeedsTwoArguments(7, "custom")

    with pytest.raises(NeedsTwoArguments) as caught:
        cpu2(fail).distributed()
    assert caught.value.code == 7 and caught.value.args == (7, "custom")
    assert isinstance(caught.value, DistributedExecutionError)


class CannotBeRebuilt(Exception):
    """A user's class whose constructor does not fit its ``args``: unpickling it raises TypeError."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"error {code}: {detail}")


def test_a_user_exception_that_cannot_be_rebuilt_arrives_as_a_plain_error() -> None:
    def fail() -> None:
        raise CannotBeRebuilt(7, "the detail")

    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(fail).distributed()
    assert type(caught.value) is DistributedExecutionError
    assert "CannotBeRebuilt: error 7: the detail" in str(caught.value)
    assert 'raise CannotBeRebuilt(7, "the detail")' in caught.value.remote_traceback
    assert caught.value.rank in (0, 1) and isinstance(
        caught.value.failures[caught.value.rank], DistributedExecutionError
    )


def test_an_exception_class_the_caller_cannot_import_becomes_a_plain_error(tmp_path: Path) -> None:
    module_dir = tmp_path / "rank_only"
    module_dir.mkdir()
    (module_dir / "rank_only_errors.py").write_text("class HiddenError(Exception):\n    pass\n")

    def fail(path: str) -> None:
        import sys

        sys.path.insert(0, path)
        import rank_only_errors

        raise rank_only_errors.HiddenError("invisible class")

    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(fail).distributed(str(module_dir))
    assert type(caught.value) is DistributedExecutionError
    assert "rank_only_errors.HiddenError: invisible class" in str(caught.value)
    assert "invisible class" in caught.value.remote_traceback


def test_the_first_failure_stops_the_other_ranks_at_once() -> None:
    def one_fails_one_hangs() -> None:
        if os.environ["RANK"] == "1":
            raise KeyError("fast failure")
        time.sleep(120)

    started = time.monotonic()
    with pytest.raises(KeyError) as caught:
        cpu2(one_fails_one_hangs).distributed()
    assert time.monotonic() - started < 5
    assert caught.value.exit_codes[0] == -15  # SIGTERM from the launcher
    assert set(caught.value.failures) == {1}
    assert "rank 0: stopped by the launcher, killed by SIGTERM" in str(caught.value)


def test_a_rank_ignoring_sigterm_is_killed_after_the_grace_period(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "1")

    def stubborn() -> None:
        import signal

        if os.environ["RANK"] == "1":
            time.sleep(0.5)
            raise RuntimeError("rank 1 gives up")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(120)

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 1 gives up"):
        cpu2(stubborn).distributed()
    assert time.monotonic() - started < 5


def test_root_cause_is_the_rank_that_raised_not_the_peer_that_lost_it() -> None:
    def collective() -> None:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            raise ArithmeticError("rank 1 broke before the all_reduce")
        dist.all_reduce(torch.ones(1))

    with pytest.raises(ArithmeticError) as caught:
        cpu2(collective).distributed()
    assert caught.value.rank == 1


@pytest.mark.parametrize(
    "how, expected",
    [
        ("os_exit", r"exited with status 0 without returning a value"),
        ("os_exit_3", r"exited with exit code 3 before returning a value"),
        ("sigkill", r"killed by SIGKILL \(SIGKILL usually comes from the out-of-memory killer"),
        ("sigsegv", r"killed by SIGSEGV"),
    ],
)
def test_a_rank_that_ends_without_returning_is_a_failure_that_says_how(how: str, expected: str) -> None:
    def leave(how: str) -> str:
        import signal

        if os.environ["RANK"] == "0":
            time.sleep(0.3)
            return "fine"
        if how == "os_exit":
            os._exit(0)
        if how == "os_exit_3":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL if how == "sigkill" else signal.SIGSEGV)
        return "unreachable"

    with pytest.raises(DistributedExecutionError, match=expected) as caught:
        cpu2(leave).distributed(how)
    assert isinstance(caught.value.failures[1], RankExitError)
    assert caught.value.rank == 1


@pytest.mark.parametrize(
    "code, status, shown",
    [(3, 3, "sys.exit(3)"), ("out of data", 1, "sys.exit('out of data')"), (True, 1, "sys.exit(True)")],
)
def test_sys_exit_in_a_rank_is_its_exit_code_as_under_torchrun(code: object, status: int, shown: str) -> None:
    # torchrun reports a worker's own status: sys.exit(3) is exit code 3 (it was reported as 1), a message is 1.
    def leave(code: object) -> str:
        import sys

        if os.environ["RANK"] == "1":
            sys.exit(code)
        return "fine"

    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(leave).distributed(code)
    error = caught.value
    assert (error.rank, error.exit_codes[1], error.failures[1].exit_code) == (1, status, status)
    assert str(error).splitlines()[0].endswith(f".leave: rank 1 of 2: the function called {shown} before returning")
    assert f"rank 1: failed first (root cause), exit code {status}" in str(error)


@pytest.mark.parametrize("code", [0, None])
def test_sys_exit_0_in_a_rank_is_done_as_under_torchrun(code: object) -> None:
    # torchrun counts a worker that exits 0 as done: the rank's value is None, as if it had returned.
    def leave(code: object) -> str:
        import sys

        if os.environ["RANK"] == "1":
            sys.exit(code)
        return "fine"

    assert cpu2(leave).distributed(code) == ["fine", None]


def test_a_rank_that_returns_without_a_collective_its_peer_waits_in_is_named() -> None:
    # Rank 1 skips the second all_reduce and returns; rank 0's all_reduce loses its peer ("Connection closed by
    # peer"). The report said "another rank exited first (failed, or was stopped)", of a rank that had finished.
    def skips() -> int:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        tensor = torch.ones(1)
        dist.all_reduce(tensor)
        if dist.get_rank() == 0:
            dist.all_reduce(tensor)
        return dist.get_rank()

    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(skips).distributed()
    report = str(caught.value)
    assert caught.value.rank == 0 and "rank 1: finished, exit code 0" in report
    assert (
        "Rank 1 returned while rank 0 still waited in all_reduce #2 of the default group, having issued only 1 "
        "collective there: it skipped a collective (or returned early)"
    ) in report, report
    assert "another rank exited first" not in report


def test_an_unpicklable_return_value_names_the_rank_and_type() -> None:
    def lock() -> object:
        import threading

        return threading.Lock() if os.environ["RANK"] == "1" else None

    with pytest.raises(SerializationError, match=r"return value of rank 1 \(a _thread.lock\) cannot be pickled"):
        cpu2(lock).distributed()


def test_errors_pickle_as_plain_distributed_execution_errors() -> None:
    import pickle

    with pytest.raises(ValueError) as caught:
        cpu2(fails_on_rank_one).distributed(lines=1)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is DistributedExecutionError
    assert str(copy) == str(caught.value) and copy.rank == 1


def test_tracebacks_of_notebook_code_name_its_file_and_line(run_script) -> None:
    done = run_script(
        """
        from databricks.air import distributed

        def check(value):
            if value > 1:
                raise OverflowError(f"value {value} too large")

        @distributed(num_accelerators=2, accelerator_type="CPU")
        def train(value):
            check(value)

        try:
            train.distributed(5)
        except OverflowError as error:
            print(error.remote_traceback)
        """
    )
    assert done.returncode == 0, done.stderr
    assert 'script.py", line 10, in train\n    check(value)' in done.stdout
    assert 'script.py", line 6, in check\n    raise OverflowError(f"value {value} too large")' in done.stdout


def test_a_rank_that_returned_is_not_listed_where_the_stopped_ranks_were(tmp_path: Path) -> None:
    """The failure snapshot may catch a rank on its way out; the report lists only ranks the launcher stopped."""
    from databricks.air._engine import failures, hang_report
    from databricks.air._engine.outcome import OutcomeKind, RankOutcome, RankRecord
    from databricks.air._engine.snapshot import RankSnapshot
    from databricks.air._engine.stop_report import StopReport
    from databricks.air._engine.supervision import StopReason

    logs = []
    for rank in range(3):
        logs.append(tmp_path / f"rank_{rank}.txt")
        logs[-1].write_text("")
    now = time.time()
    outcomes = [
        RankOutcome(0, 10, str(logs[0]), status=0, record=RankRecord(OutcomeKind.RETURNED, value=1), exited_at=now),
        RankOutcome(
            1,
            11,
            str(logs[1]),
            status=1,
            exited_at=now,
            record=RankRecord(OutcomeKind.RAISED, error_type="ValueError", message="boom"),
        ),
        RankOutcome(2, 12, str(logs[2]), status=-15, stopped_at=now + 1, exited_at=now + 1),
    ]
    snapshots = {
        rank: RankSnapshot(
            rank, 10 + rank, now, threads=[], groups=None, sources={"probe": "not listening", "stacks": "ok"}
        )
        for rank in (0, 2)
    }
    views = [hang_report.RankView(rank, snapshot=snapshots[rank]) for rank in (0, 2)]
    report = StopReport(StopReason.FAILURE, hang_report.build(views, now=now), None, snapshots)
    message = str(failures.build_error(outcomes, "fit", str(tmp_path), stop_report=report))
    where = message[message.index("When rank 1 failed, the other ranks were:") :]
    assert "rank 2:" in where and "rank 0:" not in where
    assert "rank 0: finished, exit code 0" in message
