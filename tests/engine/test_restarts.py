"""Calls that restart after a failure that is not the function's own (``max_restarts``), within one deadline."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List

import psutil
import pytest

from mlflow_fixtures import only_run, store  # noqa: F401 - fixture
from process_helpers import server_descendants, wait_until
from databricks.air import distributed
from databricks.air._engine import restarts
from databricks.air._engine.outcome import RankOutcome
from databricks.air.exceptions import (
    DistributedExecutionError,
    LocalExecutionTimeoutError,
    RankExitError,
    RuntimeConfigurationError,
)

# --- what is restarted (the decision alone) ----------------------------------------------------------------------------


def _outcomes(tmp_path: Path, lines: Dict[int, str]) -> List[RankOutcome]:
    found = []
    for rank in (0, 1):
        log = tmp_path / f"rank_{rank}.txt"
        log.write_text(lines.get(rank, "") + "\n")
        found.append(RankOutcome(rank=rank, pid=0, log_path=str(log), status=1))
    return found


def _decide(error: BaseException, outcomes: List[RankOutcome], **kwargs: Any) -> restarts.Restart:
    settings: Dict[str, Any] = dict(attempt=0, max_restarts=2, restart_on=(), history=[], now=100.0)
    settings.update(kwargs)
    return restarts.decide(error, outcomes, **settings)


def _failed(rank_error: BaseException, traceback: str = "") -> DistributedExecutionError:
    return DistributedExecutionError("report", rank=1, failures={1: rank_error}, remote_traceback=traceback)


def test_a_rank_killed_by_a_signal_is_restarted(tmp_path: Path) -> None:
    decision = _decide(_failed(RankExitError("killed", rank=1, exit_code=-9)), _outcomes(tmp_path, {}))
    assert decision.restart and decision.cause == "rank 1 was killed by SIGKILL (the kernel's OOM killer?)"


def test_a_lost_peer_or_a_machine_fault_line_is_restarted(tmp_path: Path) -> None:
    lost = _failed(RuntimeError("Connection closed by peer"), 'File ".../torch/distributed/distributed_c10d.py"')
    assert _decide(lost, _outcomes(tmp_path, {})).restart
    xid = _decide(_failed(RuntimeError("boom")), _outcomes(tmp_path, {0: "NVRM: Xid (PCI:0000:3b:00): 79, pid=1"}))
    assert xid.restart and "Xid" in xid.cause


def test_the_functions_own_error_is_not_restarted_unless_named(tmp_path: Path) -> None:
    error = _failed(ValueError("bad batch"))
    decision = _decide(error, _outcomes(tmp_path, {}))
    assert not decision.restart and "restart_on" in decision.why
    assert _decide(error, _outcomes(tmp_path, {}), restart_on=(ValueError,)).restart
    exited = _decide(_failed(RankExitError("exit 3", rank=1, exit_code=3)), _outcomes(tmp_path, {}))
    assert not exited.restart


def test_an_illegal_memory_access_is_the_functions_fault(tmp_path: Path) -> None:
    lines = {1: "RuntimeError: CUDA error: an illegal memory access was encountered"}
    decision = _decide(_failed(RuntimeError("CUDA error")), _outcomes(tmp_path, lines))
    assert not decision.restart and "function's own fault" in decision.why


def test_the_thrash_guard_and_the_last_restart(tmp_path: Path) -> None:
    killed = _failed(RankExitError("killed", rank=1, exit_code=-9))
    first = _decide(killed, _outcomes(tmp_path, {}), now=100.0)
    again_soon = _decide(killed, _outcomes(tmp_path, {}), attempt=1, history=[first], now=130.0)
    assert not again_soon.restart and "within 60 s" in again_soon.why
    again_later = _decide(killed, _outcomes(tmp_path, {}), attempt=1, history=[first], now=170.0)
    assert again_later.restart
    used_up = _decide(killed, _outcomes(tmp_path, {}), attempt=2, history=[first, again_later], now=400.0)
    assert not used_up.restart and "all 2 restart(s) are used" in used_up.why


def test_bad_restart_settings_are_refused_at_decoration() -> None:
    for bad in (-1, 101, 1.5, True):
        with pytest.raises(RuntimeConfigurationError, match="max_restarts must be a whole number"):
            distributed(accelerator_type="CPU", max_restarts=bad)
    with pytest.raises(RuntimeConfigurationError, match="restart_on takes exception classes"):
        distributed(accelerator_type="CPU", restart_on=("ValueError",))
    with pytest.raises(RuntimeConfigurationError, match="KeyboardInterrupt"):
        distributed(accelerator_type="CPU", restart_on=(KeyboardInterrupt,))
    function = distributed(accelerator_type="CPU", max_restarts=2, restart_on=ValueError)(len)
    changed = function.with_overrides(max_restarts=1)
    assert (function.max_restarts, changed.max_restarts, changed.restart_on) == (2, 1, (ValueError,))


# --- real ranks ------------------------------------------------------------------------------------------------------


def _die_once(kind: str) -> Any:
    """Rank 1 fails in the first attempt (``kind``: killed, or ValueError); every rank returns its attempt."""
    import os
    import signal

    import torch
    import torch.distributed as dist

    from databricks.air.runtime import get_restart_count

    dist.init_process_group("gloo")
    if get_restart_count() == 0 and dist.get_rank() == 1:
        if kind == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("a flaky batch")
    total = torch.ones(1)
    dist.all_reduce(total)
    dist.destroy_process_group()
    return get_restart_count(), os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["TORCHELASTIC_RUN_ID"]


def test_a_killed_rank_restarts_every_rank_and_keeps_the_attempts_logs(
    store: str, capfd: pytest.CaptureFixture
) -> None:
    import mlflow

    function = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120, max_restarts=1)(_die_once)
    values = function.distributed("killed")
    assert [value[:2] for value in values] == [(1, "1"), (1, "1")]
    err = capfd.readouterr().err
    assert "databricks.air: rank 1 was killed by SIGKILL (the kernel's OOM killer?); restart 1 of 1" in err
    log_dir = Path(function.last_log_dir)
    assert (log_dir / "attempt_0" / "rank_1.txt").exists() and (log_dir / "rank_1.txt").exists()
    run = only_run(mlflow.MlflowClient(store))  # one run for the call, with the restart in it
    assert run.info.status == "FINISHED" and run.data.tags["databricks.air.restarts"] == "1"
    assert "killed by SIGKILL" in run.data.tags["databricks.air.restart_1"]
    assert run.data.metrics["restarts"] == 1
    artifacts = [a.path for a in mlflow.MlflowClient(store).list_artifacts(run.info.run_id, "logs/attempt_0")]
    assert "logs/attempt_0/rank_1.txt" in artifacts
    assert wait_until(lambda: not [p for p in server_descendants() if p.status() != psutil.STATUS_ZOMBIE], 10)


def test_the_functions_error_is_restarted_only_when_named() -> None:
    plain = distributed(accelerator_type="CPU", num_accelerators=2, timeout=120, max_restarts=2)(_die_once)
    with pytest.raises(ValueError, match="a flaky batch") as caught:
        plain.distributed("value")
    assert "attempt 0: rank 1 raised ValueError: a flaky batch: not restarted" in str(caught.value)
    named = plain.with_overrides(restart_on=(ValueError,))
    assert [value[0] for value in named.distributed("value")] == [1, 1]


def _die_at_once() -> None:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_a_call_that_dies_at_once_each_time_stops_restarting() -> None:
    function = distributed(accelerator_type="CPU", num_accelerators=1, timeout=120, max_restarts=5)(_die_at_once)
    with pytest.raises(DistributedExecutionError) as caught:
        function.distributed()
    report = str(caught.value)
    assert "attempt 0: rank 0 was killed by SIGKILL (the kernel's OOM killer?): restarted" in report
    assert (
        "attempt 1: rank 0 was killed by SIGKILL (the kernel's OOM killer?): not restarted: it failed again "
        "for the same cause within 60 s of restart 1" in report
    )
    assert sorted(os.listdir(function.last_log_dir)) == ["attempt_0", "rank_0.txt"]


def _fail_slowly() -> None:
    import os
    import signal
    import time

    from databricks.air.runtime import get_restart_count

    time.sleep(0.8)
    if get_restart_count() % 2:  # alternate the cause: the thrash guard never stops it, the deadline does
        raise ValueError("odd attempt")
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_the_timeout_covers_every_attempt() -> None:
    function = distributed(
        accelerator_type="CPU", num_accelerators=1, timeout=4, max_restarts=50, restart_on=(ValueError,)
    )(_fail_slowly)
    started = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError):
        function.distributed()
    took = time.monotonic() - started
    assert took < 4 + 5, took  # the timeout plus the grace and the stop, not 50 attempts
    kept = [name for name in os.listdir(function.last_log_dir) if name.startswith("attempt_")]
    assert len(kept) >= 2


def _train_and_die_once(folder: str) -> int:
    import os
    import signal

    import torch

    from databricks.air.data import Checkpointer
    from databricks.air.runtime import get_restart_count

    model = torch.nn.Linear(1, 1)
    checkpointer = Checkpointer(folder)
    start = checkpointer.restore(model=model) or 0
    for step in range(start + 1, 30):
        if step % 10 == 0:
            checkpointer.save(step, model=model)
        if get_restart_count() == 0 and step == 25:
            os.kill(os.getpid(), signal.SIGKILL)
    return start


@pytest.mark.slow
def test_the_restart_line_names_the_step_the_next_attempt_resumes_from(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    function = distributed(accelerator_type="CPU", num_accelerators=1, timeout=120, max_restarts=1)
    assert function(_train_and_die_once).distributed(str(tmp_path / "ckpt")) == [20]
    assert "; restart 1 of 1 from step 20 (attempt 0's logs:" in capfd.readouterr().err
