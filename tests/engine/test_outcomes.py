"""Every way a rank can end is one ``OutcomeKind`` (``_engine/outcome.py``), with real rank processes."""

from __future__ import annotations

import inspect
import os
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from databricks.air import _payload
from databricks.air._engine.call import Launch
from databricks.air._engine.local_call import LocalCall
from databricks.air._engine.outcome import OutcomeKind, RankOutcome, RankRecord, read_record
from databricks.air._engine.values import write_value_file


def returns() -> int:
    return 5


def raises() -> None:
    raise ValueError("bad value")


def exits() -> None:
    sys.exit(3)


def interrupted() -> None:
    raise KeyboardInterrupt


def returns_what_cannot_be_pickled() -> Any:
    import threading

    return threading.Lock()


def returns_what_the_caller_cannot_unpickle() -> Any:
    import types

    module = types.ModuleType("air_module_only_in_the_rank")
    exec("class Thing:\n    pass\n", module.__dict__)
    sys.modules[module.__name__] = module
    return module.Thing()


def ends_without_a_word() -> None:
    os._exit(0)


def is_killed() -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def run_one_rank(function: Callable[..., Any], tmp_path: Path) -> RankOutcome:
    launch = Launch(
        name=function.__name__,
        world_size=1,
        function=_payload.serialize_function(function),
        arguments=_payload.serialize_arguments(function, inspect.signature(function).bind()),
        environ=dict(os.environ),
        cwd=os.getcwd(),
        sys_path=list(sys.path),
        argv=[""],
        log_dir=str(tmp_path),
        timeout=120,
    )
    call = LocalCall(launch)
    try:
        call.run()
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - each kind has its own error; test_failures.py checks those
        pass
    return call.outcomes[0]


@pytest.mark.parametrize(
    "function, kind",
    [
        (returns, OutcomeKind.RETURNED),
        (raises, OutcomeKind.RAISED),
        (exits, OutcomeKind.EXITED),
        (interrupted, OutcomeKind.INTERRUPTED),
        (returns_what_cannot_be_pickled, OutcomeKind.UNPICKLABLE_RESULT),
        (returns_what_the_caller_cannot_unpickle, OutcomeKind.UNPICKLABLE_RESULT),
        (ends_without_a_word, OutcomeKind.DIED),
        (is_killed, OutcomeKind.DIED),
    ],
)
def test_each_way_a_rank_ends_is_one_kind(function: Callable[..., Any], kind: OutcomeKind, tmp_path: Path) -> None:
    outcome = run_one_rank(function, tmp_path)
    assert outcome.kind is kind
    assert outcome.succeeded is (kind is OutcomeKind.RETURNED)
    if kind is OutcomeKind.RETURNED:
        assert outcome.value == 5
    elif kind is OutcomeKind.DIED:
        assert outcome.record is None
    else:
        assert isinstance(outcome.record, RankRecord) and outcome.record.message is not None


def test_a_record_says_what_failed_and_carries_the_exception(tmp_path: Path) -> None:
    outcome = run_one_rank(raises, tmp_path)
    record = outcome.record
    assert record is not None
    assert (record.error_type, record.message) == ("ValueError", "bad value")
    assert 'raise ValueError("bad value")' in record.traceback and "_engine/rank.py" not in record.traceback
    assert isinstance(pickle.loads(record.exception), ValueError)
    assert run_one_rank(returns_what_the_caller_cannot_unpickle, tmp_path).record.message.startswith(
        "the return value of rank 0 cannot be unpickled in the caller: "
    )


def test_reading_records(tmp_path: Path) -> None:
    path = tmp_path / "result_0.bin"
    assert read_record(str(path), 0) is None and read_record(None, 0) is None  # the rank wrote nothing
    write_value_file(RankRecord.returned([1, 2]), str(path))
    assert read_record(str(path), 0) == read_record(path.read_bytes(), 0)  # a path here, its bytes from Ray
    assert read_record(b"not a value file", 3).kind is OutcomeKind.UNPICKLABLE_RESULT


def test_a_rank_that_returned_and_then_exited_badly_died() -> None:
    outcome = RankOutcome(rank=0, pid=1, log_path="", status=1, record=RankRecord.returned(5))
    assert outcome.kind is OutcomeKind.DIED and not outcome.succeeded
    with pytest.raises(ValueError, match="no return value"):
        outcome.value
    lost = RankOutcome(rank=1, pid=2, log_path="", status=-9, record=RankRecord.host_lost("its actor died"))
    assert lost.kind is OutcomeKind.HOST_LOST and lost.failed_on_its_own
    assert RankOutcome(rank=2, pid=3, log_path="").kind is OutcomeKind.RUNNING
