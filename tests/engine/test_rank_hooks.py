"""The engine's hooks at rank start and rank end (``_engine/rank_hooks.py``), with real rank processes.

The probe hook (``rank_hook_probe.py``) leaves a file per rank at its start and at its end.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from databricks.air import distributed
from databricks.air.exceptions import DistributedExecutionError, LocalExecutionTimeoutError

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "probe"
    folder.mkdir()
    monkeypatch.setenv("DATABRICKS_AIR_RANK_HOOKS", "rank_hook_probe")
    monkeypatch.setenv("AIR_HOOK_PROBE_DIR", str(folder))
    monkeypatch.setenv("DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "3")
    return folder


def notes(folder: Path, what: str, rank: int) -> list:
    path = folder / f"{what}_{rank}"
    return path.read_text().split() if path.exists() else []


def test_hooks_run_before_the_function_and_at_the_end(probe: Path) -> None:
    def started_first() -> bool:
        return (Path(os.environ["AIR_HOOK_PROBE_DIR"]) / f"started_{os.environ['RANK']}").exists()

    assert cpu2(started_first).distributed() == [True, True]
    for rank in (0, 1):
        assert len(notes(probe, "started", rank)) == 1
        assert len(notes(probe, "ended", rank)) == 1


def test_a_rank_that_raises_still_ends_its_hooks(probe: Path) -> None:
    def fail() -> None:
        raise ValueError("bad batch")

    with pytest.raises(ValueError):
        cpu2(fail).distributed()
    assert notes(probe, "ended", 0) and notes(probe, "ended", 1)


def test_a_rank_stopped_by_the_launcher_ends_its_hooks_then_dies_by_sigterm(probe: Path) -> None:
    def rank1_fails() -> None:
        if os.environ["RANK"] == "1":
            while not (Path(os.environ["AIR_HOOK_PROBE_DIR"]) / "started_0").exists():
                time.sleep(0.05)
            raise ValueError("rank 1 fails")
        time.sleep(60)

    with pytest.raises(DistributedExecutionError) as caught:
        cpu2(rank1_fails).distributed()
    assert notes(probe, "ended", 0), "rank 0 was stopped without ending its hooks"
    assert caught.value.exit_codes[0] == -signal.SIGTERM
    assert "rank 0: stopped by the launcher, killed by SIGTERM" in str(caught.value)


@pytest.mark.slow
def test_a_rank_stuck_in_native_code_ends_its_hooks_at_sigterm(probe: Path) -> None:
    def stuck() -> None:
        signal.sigwait([signal.SIGUSR2])  # blocks in C: the main thread never runs a Python signal handler

    started = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError):
        distributed(num_accelerators=2, accelerator_type="CPU", timeout=2)(stuck).distributed()
    assert time.monotonic() - started < 30
    for rank in (0, 1):
        assert len(notes(probe, "ended", rank)) == 1, f"rank {rank}'s hooks did not end while it was stuck"


def test_without_hooks_sigterm_is_left_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_AIR_RANK_HOOKS", raising=False)

    def disposition() -> bool:
        return signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    assert cpu2(disposition).distributed() == [True, True]


def test_a_process_forked_from_a_rank_dies_at_sigterm_as_before(probe: Path) -> None:
    def fork_and_terminate() -> tuple:
        checked = os.fork()
        if checked == 0:
            os._exit(0 if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else 3)
        stopped = os.fork()
        if stopped == 0:
            time.sleep(60)
            os._exit(0)
        os.kill(stopped, signal.SIGTERM)  # at once: also before the child could reset anything
        return tuple(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in (checked, stopped))

    assert cpu2(fork_and_terminate).distributed() == [(0, -signal.SIGTERM)] * 2
    assert len(notes(probe, "ended", 0)) == len(notes(probe, "ended", 1)) == 1  # the children ran no hook
