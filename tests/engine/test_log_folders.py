"""Call log folders do not pile up: the newest are kept, old ones go, a running call's folder never does."""

from __future__ import annotations

import os
import time
from pathlib import Path

from databricks.air import _log_folders as log_folders
from databricks.air._call_folder import CallFolder

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


def test_a_running_call_is_kept_and_a_sweep_of_quick_calls_keeps_only_the_newest(tmp_path: Path) -> None:
    # A call still running (its caller holds the lock in its folder) is never removed, however old its folder or
    # however many calls came since; finished calls beyond the newest N go at once, however recent: a sweep of 200
    # quick calls keeps 50 folders, not 200.
    now = time.time()
    running = log_folders.make("long", str(tmp_path), keep_calls=50, keep_days=7)
    os.utime(running.path, (now - 30 * DAY, now - 30 * DAY))
    assert log_folders.running(running.path)
    for _ in range(200):
        log_folders.make("quick", str(tmp_path), keep_calls=50, keep_days=7).release()
    left = [p for p in tmp_path.iterdir() if log_folders._CALL_FOLDER.match(p.name)]
    assert len(left) == 51 and Path(running.path) in left  # the newest 50, and the one still running
    assert all(not os.path.exists(CallFolder(str(p)).lock) for p in left if str(p) != running.path)
    running.release()  # ended now: its folder counts among the newest, like any call that just ended
    assert not log_folders.running(running.path)
    assert len(log_folders.prune(str(tmp_path), keep_calls=50, keep_days=7)) == 1


def test_a_killed_callers_folder_is_no_longer_protected(run_script, tmp_path: Path) -> None:
    # The lock dies with its holder: the folder of a caller killed mid-call is pruned like any finished call's.
    done = run_script(
        f"""
        import os, signal
        from databricks.air import _log_folders as log_folders
        folder = log_folders.make("killed", {str(tmp_path / "logs")!r}, keep_calls=50, keep_days=7)
        print(folder.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    path = done.stdout.strip()
    assert done.returncode == -9 and os.path.isdir(path) and os.path.exists(CallFolder(path).lock)
    assert not log_folders.running(path)
    assert log_folders.prune(str(tmp_path / "logs"), keep_calls=1, keep_days=7, room_for=1) == [path]


def test_only_call_folders_are_touched_and_zero_turns_a_limit_off(tmp_path: Path) -> None:
    now = time.time()
    mine = tmp_path / "my-notes"
    mine.mkdir()
    os.utime(mine, (now - 30 * DAY, now - 30 * DAY))
    unicode_name = _folder(tmp_path, 1, now - 30 * DAY, name="entraîner")
    assert log_folders.prune(str(tmp_path), keep_calls=0, keep_days=0, now=now) == []
    log_folders.prune(str(tmp_path), keep_calls=0, keep_days=7, now=now)
    assert mine.exists() and not unicode_name.exists()


def test_make_prunes_under_the_given_root(tmp_path: Path) -> None:
    stale = _folder(tmp_path, 1, time.time() - 2 * 3600)
    made = log_folders.make("train.<locals>.step", str(tmp_path), keep_calls=1, keep_days=7)
    assert Path(made.path).parent == tmp_path and Path(made.path).name.split("-", 2)[2].startswith(
        "train__locals__step-"
    )
    assert log_folders._CALL_FOLDER.match(Path(made.path).name)
    assert not stale.exists()
    made.release()
    assert os.listdir(made.path) == []
    assert log_folders.describe_limits(1, 7) == "kept: newest 1 calls, 7 days"
    assert log_folders.describe_limits(0, 0) == "kept until removed"
