"""A bad setting in the environment fails the same way in a decorated function's call and in ``air run``: the
message names the variable, its value, what is accepted and how to get the default (``_settings.py``), and nothing
is started or recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from workload_support import air, write_workload
from databricks.air import _settings, distributed
from databricks.air.exceptions import RuntimeConfigurationError

BAD = [
    (
        "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS",
        "abc",
        "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS must be a number of seconds, not 'abc'; unset it for the default, 3 s",
    ),
    (
        "DATABRICKS_AIR_LOG_UPLOAD_SECONDS",
        "-1",
        "DATABRICKS_AIR_LOG_UPLOAD_SECONDS must be a number of seconds above 0, not '-1'; unset it for the default, "
        "30 s",
    ),
    (
        "DATABRICKS_AIR_SYSTEM_METRICS_SECONDS",
        "nan",
        "DATABRICKS_AIR_SYSTEM_METRICS_SECONDS must be a number of seconds above 0, not 'nan'; unset it for the "
        "default, 10 s",
    ),
    (
        "DATABRICKS_AIR_MLFLOW",
        "flase",
        "DATABRICKS_AIR_MLFLOW must be one of 1, true, yes, on (on) or 0, false, no, off (off), not 'flase'; unset it "
        "for the default (on)",
    ),
]


def _one_rank() -> int:
    return 0


@pytest.mark.parametrize("variable, value, message", BAD)
def test_a_bad_value_fails_the_same_way_in_the_decorator_and_in_air_run(
    variable: str, value: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    call = distributed(num_accelerators=1, accelerator_type="CPU")(_one_rank)
    with pytest.raises(RuntimeConfigurationError) as caught:
        call.distributed()
    assert str(caught.value) == message
    assert call.last_log_dir is None  # no rank was started

    done = air("run", "-f", str(write_workload(tmp_path, command="echo ran")), env={variable: value})
    assert (done.returncode, done.stderr.strip()) == (2, f"Error: {message}")
    assert air("list", "--all-status").stdout.startswith("No runs.")  # none was recorded


def test_the_workload_timeout_override_is_read_as_the_others() -> None:
    with pytest.raises(
        RuntimeConfigurationError,
        match=(
            "^DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS must be a number of seconds above 0, not '0'; unset it for the "
            "workload's timeout_minutes$"
        ),
    ):
        _settings.WORKLOAD_TIMEOUT_SECONDS.read({"DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS": "0"})
    assert _settings.WORKLOAD_TIMEOUT_SECONDS.read({"DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS": " 8 "}) == 8.0
    assert _settings.WORKLOAD_TIMEOUT_SECONDS.read({}) is None


def test_the_supervisors_grace_and_retry_delay_are_the_decorators_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air.workloads import supervisor

    monkeypatch.delenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS")
    assert supervisor.grace_seconds() == _settings.TERMINATE_GRACE_SECONDS.default == 3.0
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "-2")  # a negative one counts as 0, as in a call
    assert supervisor.grace_seconds() == 0.0
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "later")  # no longer the default in silence
    with pytest.raises(RuntimeConfigurationError, match="^DATABRICKS_AIR_TERMINATE_GRACE_SECONDS must be"):
        supervisor.grace_seconds()
