"""Call log folders do not pile up: the newest are kept, old ones go, a running call's folder never does."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from databricks.air import _log_folders as log_folders
from databricks.air.exceptions import RuntimeConfigurationError

DAY = 86400.0


def _folder(root: Path, index: int, changed: float, name: str = "train") -> Path:
    folder = root / f"20261101-{index:06d}-{name}-abcd{index:04d}"
    folder.mkdir()
    (folder / "rank_0.txt").write_text("a line\n")
    for path in (folder / "rank_0.txt", folder):
        os.utime(path, (changed, changed))
    return folder


def test_only_the_newest_calls_are_kept(tmp_path: Path) -> None:
    now = time.time()
    folders = [_folder(tmp_path, i, now - 2 * 3600 - (10 - i) * 60) for i in range(10)]  # 0 oldest
    removed = log_folders.prune(str(tmp_path), keep_calls=4, keep_days=7, now=now)
    assert sorted(removed) == sorted(str(f) for f in folders[:6])
    assert [f.exists() for f in folders] == [False] * 6 + [True] * 4


def test_folders_idle_for_longer_than_the_limit_go_whatever_their_number(tmp_path: Path) -> None:
    now = time.time()
    old = _folder(tmp_path, 1, now - 8 * DAY)
    recent = _folder(tmp_path, 2, now - 6 * DAY)
    log_folders.prune(str(tmp_path), keep_calls=50, keep_days=7, now=now)
    assert not old.exists() and recent.exists()


def test_a_call_still_writing_is_kept_even_past_the_count(tmp_path: Path) -> None:
    # Another process's call started days ago (its folder's name is the oldest) but its ranks still write their logs;
    # and calls changed within the last hour may all be running at once: none of them is removed by count.
    now = time.time()
    running = _folder(tmp_path, 0, now - 3 * DAY)
    os.utime(running / "rank_0.txt", (now - 5, now - 5))
    recent = [_folder(tmp_path, i, now - 600) for i in range(1, 4)]
    idle = _folder(tmp_path, 4, now - 2 * 3600)
    log_folders.prune(str(tmp_path), keep_calls=2, keep_days=7, now=now)
    assert running.exists() and all(f.exists() for f in recent) and not idle.exists()


def test_only_call_folders_are_touched_and_zero_turns_a_limit_off(tmp_path: Path) -> None:
    now = time.time()
    mine = tmp_path / "my-notes"
    mine.mkdir()
    os.utime(mine, (now - 30 * DAY, now - 30 * DAY))
    unicode_name = _folder(tmp_path, 1, now - 30 * DAY, name="entraîner")
    assert log_folders.prune(str(tmp_path), keep_calls=0, keep_days=0, now=now) == []
    log_folders.prune(str(tmp_path), keep_calls=0, keep_days=7, now=now)
    assert mine.exists() and not unicode_name.exists()


def test_make_prunes_under_the_configured_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_LOG_DIR", str(tmp_path))
    monkeypatch.setenv("DATABRICKS_AIR_LOG_KEEP_CALLS", "1")
    stale = _folder(tmp_path, 1, time.time() - 2 * 3600)
    made = Path(log_folders.make("train.<locals>.step"))
    assert made.parent == tmp_path and made.name.split("-", 2)[2].startswith("train__locals__step-")
    assert log_folders._CALL_FOLDER.match(made.name)
    assert not stale.exists()
    assert log_folders.describe_limits() == "kept: newest 1 calls, 7 days"


@pytest.mark.parametrize("variable,value", [("DATABRICKS_AIR_LOG_KEEP_CALLS", "many"),
                                            ("DATABRICKS_AIR_LOG_KEEP_CALLS", "2.5"),
                                            ("DATABRICKS_AIR_LOG_KEEP_DAYS", "-1")])
def test_a_bad_limit_says_which_variable_and_what_it_takes(variable: str, value: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(RuntimeConfigurationError, match=f"{variable} must be a (whole )?number >= 0"):
        log_folders.limits()
