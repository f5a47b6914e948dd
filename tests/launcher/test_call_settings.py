"""Every setting a call reads from the environment is read and checked in one place (``_settings.py``), before the
call prints, makes or records anything; each message names the variable and says how to get the default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from databricks.air import _settings, _variables
from databricks.air.exceptions import RuntimeConfigurationError


def test_the_defaults(tmp_path: Path) -> None:
    settings = _settings.read({"DATABRICKS_AIR_LOG_DIR": str(tmp_path / "logs")})
    assert (settings.keep_calls, settings.keep_days, settings.tracking, settings.system_metrics) == (
        50,
        7.0,
        True,
        True,
    )
    assert (settings.log_upload_seconds, settings.system_metrics_seconds) == (30.0, 10.0)
    assert settings.engine() == dict(
        show_all_ranks=False,
        start_method="fork",
        grace_period=3.0,
        snapshot_seconds=5.0,
        stall_seconds=600.0,
        straggler_seconds=30.0,
    )
    assert settings.log_root == str(tmp_path / "logs")  # not made yet: a call makes it


@pytest.mark.parametrize(
    "variable, value, says",
    [
        ("DATABRICKS_AIR_LOG_KEEP_CALLS", "abc", "must be a whole number >= 0"),
        ("DATABRICKS_AIR_LOG_KEEP_CALLS", "2.5", "must be a whole number >= 0"),
        ("DATABRICKS_AIR_LOG_KEEP_DAYS", "-1", "must be a number >= 0"),
        ("DATABRICKS_AIR_LOG_KEEP_DAYS", "nan", "must be a number >= 0"),
        ("DATABRICKS_AIR_LOG_UPLOAD_SECONDS", "0", "must be a number of seconds above 0"),
        ("DATABRICKS_AIR_SYSTEM_METRICS_SECONDS", "often", "must be a number of seconds above 0"),
        ("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "inf", "must be a number of seconds"),
        ("DATABRICKS_AIR_MLFLOW", "flase", r"must be one of 1, true, yes, on \(on\) or 0, false, no, off \(off\)"),
        ("DATABRICKS_AIR_SHOW_ALL_RANKS", "2", "must be one of"),
    ],
)
def test_a_bad_value_names_its_variable_and_the_default(variable: str, value: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(RuntimeConfigurationError, match=f"^{variable} {says}") as caught:
        _settings.read({variable: value, "DATABRICKS_AIR_LOG_DIR": str(tmp_path)})
    assert "unset it for the default" in str(caught.value)


def test_a_log_dir_that_is_a_file_or_cannot_be_written(tmp_path: Path) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    for where in (a_file, a_file / "logs"):
        with pytest.raises(
            RuntimeConfigurationError,
            match="notes.txt is a file, not a folder; point DATABRICKS_AIR_LOG_DIR at a folder you can write",
        ):
            _settings.read({"DATABRICKS_AIR_LOG_DIR": str(where)})
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(RuntimeConfigurationError, match="this user cannot write in"):
            _settings.read({"DATABRICKS_AIR_LOG_DIR": str(locked / "logs")})


SETTINGS = sorted(
    (value for value in vars(_settings).values() if isinstance(value, _settings.Setting)),
    key=lambda setting: setting.variable,
)


@pytest.mark.parametrize("setting", SETTINGS, ids=[setting.variable for setting in SETTINGS])
def test_every_setting_has_its_default_and_says_the_same_of_a_bad_value(setting: _settings.Setting) -> None:
    assert setting.variable in vars(_variables).values()
    assert setting.read({}) == setting.read({setting.variable: "  "}) == setting.default
    with pytest.raises(RuntimeConfigurationError) as caught:
        setting.read({setting.variable: "abc"})
    assert str(caught.value) == (
        f"{setting.variable} must be {setting.accepted}, not 'abc'; unset it {setting.when_unset}"
    )


def test_the_engines_defaults_are_the_settings_defaults() -> None:
    from databricks.air._engine import call, snapshot, stall_watch

    assert call.Launch.__dataclass_fields__["grace_period"].default == _settings.TERMINATE_GRACE_SECONDS.default
    assert snapshot.DEFAULT_BUDGET == _settings.SNAPSHOT_SECONDS.default
    assert stall_watch.DEFAULT_STALL_SECONDS == _settings.STALL_SECONDS.default
