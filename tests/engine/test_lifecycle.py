"""Timeouts, interrupts, the caller dying, concurrent calls, and what a call leaves behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from process_helpers import processes_with_marker, server_descendants, wait_until
from databricks.air import distributed
from databricks.air.exceptions import LocalExecutionTimeoutError

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def sleeper_with_child(pid_dir: str, seconds: float = 120) -> None:
    """A rank that starts a grandchild (as a DataLoader worker would), notes both pids, then sleeps."""
    import subprocess

    child = subprocess.Popen(["sleep", str(seconds)])
    Path(pid_dir, f"rank{os.environ['RANK']}").write_text(f"{os.getpid()} {child.pid}")
    print("ranks ready", flush=True)
    time.sleep(seconds)


def noted_pids(pid_dir: Path) -> list[int]:
    return [int(p) for f in pid_dir.iterdir() for p in f.read_text().split()]


def all_gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


@pytest.fixture
def pid_dir(tmp_path: Path) -> Path:
    path = tmp_path / "pids"
    path.mkdir()
    return path


def test_timeout_stops_every_rank_and_says_how_to_change_it(pid_dir: Path) -> None:
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=1.5)(sleeper_with_child)
    started = time.monotonic()
    with pytest.raises(LocalExecutionTimeoutError) as caught:
        fn.distributed(str(pid_dir))
    # Far below the ranks' 120 s: the timeout cut the call short. Not tighter: on a busy machine a cold rank server
    # takes seconds to start, and a rank still starting when it is told to stop sits out the 3 s grace period.
    assert time.monotonic() - started < 1.5 + 3 + 25
    assert isinstance(caught.value, TimeoutError)
    message = str(caught.value)
    assert "within its timeout of 1.5 s" in message and "timeout=None" in message
    assert wait_until(lambda: all_gone(noted_pids(pid_dir)), 5)


def test_the_default_timeout_is_three_hours_and_says_so() -> None:
    from databricks.air.launcher import _timeout_note

    assert distributed(accelerator_type="CPU")(sleeper_with_child).timeout == 10800
    assert "the default cap of 3 hours" in _timeout_note(10800)


def _interrupt_main_thread_when(condition, timeout: float = 60) -> threading.Thread:
    def watch() -> None:
        if wait_until(condition, timeout):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _signal_handlers() -> dict:
    return {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)}


def test_interrupt_stops_every_rank_and_what_they_started(pid_dir: Path) -> None:
    handlers = _signal_handlers()
    _interrupt_main_thread_when(lambda: len(list(pid_dir.iterdir())) == 2)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cpu2(sleeper_with_child).distributed(str(pid_dir))
    assert time.monotonic() - started < 60
    pids = noted_pids(pid_dir)
    assert len(pids) == 4
    assert wait_until(lambda: all_gone(pids), 5)
    assert _signal_handlers() == handlers
    # The next call in the same process works.
    assert cpu2(lambda: os.environ["RANK"]).distributed() == ["0", "1"]


def test_signal_handlers_are_the_same_after_calls() -> None:
    handlers = _signal_handlers()
    cpu2(lambda: None).distributed()
    with pytest.raises(ZeroDivisionError):
        cpu2(lambda: 1 / 0).distributed()
    assert _signal_handlers() == handlers


CALLER = """
    import os, sys, time
    from pathlib import Path
    from databricks.air import distributed

    @distributed(num_accelerators=2, accelerator_type="CPU")
    def train(pid_dir):
        import subprocess
        child = subprocess.Popen(["sleep", "300"])
        Path(pid_dir, "rank" + os.environ["RANK"]).write_text(f"{os.getpid()} {child.pid}")
        time.sleep(300)

    if sys.argv[2] == "fork-first":
        # A warm rank server in the pool, then a fork of the caller that outlives it (as a DataLoader worker of
        # the notebook process would): the fork must not keep the server's control socket open.
        distributed(num_accelerators=2, accelerator_type="CPU")(lambda: None).distributed()
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
    train.distributed(sys.argv[1])
"""


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["plain", "fork-first"])
def test_when_the_caller_is_killed_every_rank_and_child_is_gone_within_5_s(tmp_path: Path, variant: str) -> None:
    marker = uuid.uuid4().hex
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(CALLER))
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    caller = subprocess.Popen(
        [sys.executable, str(script), str(pid_dir), variant],
        env={**os.environ, "AIR_TEST_MARKER": marker, "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    caller_process = psutil.Process(caller.pid)
    try:
        assert wait_until(lambda: len(list(pid_dir.iterdir())) == 2, 60), "ranks did not start"
        forked = {p.pid for p in caller_process.children() if "rank_server" not in " ".join(p.cmdline())}

        def survivors() -> list:
            return [p for p in processes_with_marker(marker) if p.pid not in forked]

        assert len(survivors()) >= 6  # caller, rank server, store, 2 ranks, 2 sleeps
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        assert wait_until(lambda: not survivors(), 5), survivors()
        assert list(scratch.iterdir()) == []  # the rank server removed the private call directory
    finally:
        caller.kill()
        for process in processes_with_marker(marker):
            process.kill()


@pytest.mark.slow
def test_concurrent_calls_from_two_processes_do_not_collide(run_script) -> None:
    script = """
        import os, sys
        from databricks.air import distributed

        @distributed(num_accelerators=2, accelerator_type="CPU")
        def reduce(tag):
            import torch, torch.distributed as dist, time
            dist.init_process_group("gloo")
            t = torch.tensor([float(dist.get_rank() + tag)])
            for _ in range(20):
                dist.all_reduce(t)
                time.sleep(0.01)
            dist.destroy_process_group()
            return os.environ["MASTER_PORT"]

        for _ in range(3):
            reduce.distributed(int(sys.argv[1]))
        print("DONE")
    """
    path = Path(tempfile.mkdtemp()) / "two_callers.py"
    path.write_text(textwrap.dedent(script))
    callers = [
        subprocess.Popen([sys.executable, str(path), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    for caller in callers:
        out, err = caller.communicate(timeout=180)
        assert caller.returncode == 0, err
        assert "DONE" in out


@pytest.mark.slow
def test_concurrent_calls_from_two_threads_of_one_process() -> None:
    def reduce(tag: int) -> float:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        t = torch.tensor([float(tag)])
        dist.all_reduce(t)
        dist.destroy_process_group()
        return float(t.item())

    fn = cpu2(reduce)
    results: dict = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, fn.distributed(i))) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results == {0: [0.0, 0.0], 1: [2.0, 2.0]}


def test_nothing_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)

    def inspect_call_dir() -> list:
        import stat
        import tempfile

        call_dirs = [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("databricks-air-call-")]
        return [stat.S_IMODE(p.stat().st_mode) for p in call_dirs]

    modes = cpu2(inspect_call_dir).distributed()
    assert modes == [[0o700], [0o700]]  # private while the call runs
    with pytest.raises(ValueError):
        cpu2(lambda: int("x")).distributed()
    assert [p.name for p in scratch.iterdir()] == []  # no payload or result files after success or failure
    assert server_descendants() == []  # no rank, store or child process


def test_a_users_file_shadowing_a_module_torch_imports_is_never_run(tmp_path: Path) -> None:
    """The rank server preloads torch without the script's directory on sys.path.

    Otherwise a file named like a module torch imports (concurrent.py) would run inside the server, and a script
    by that name would start a server of its own, and so on. (Ranks later import with the caller's own sys.path,
    as the caller itself would.)
    """
    marker = tmp_path / "shadow-imported"
    (tmp_path / "concurrent.py").write_text(f"open({str(marker)!r}, 'a').write('imported')\n")
    (tmp_path / "main.py").write_text(
        textwrap.dedent(
            """
            from databricks.air import distributed

            @distributed(num_accelerators=2, accelerator_type="CPU")
            def work():
                import torch
                return torch.ones(1).item()

            print("RESULT", work.distributed())
            """
        )
    )
    done = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "RESULT [1.0, 1.0]" in done.stdout
    assert not marker.exists()


@pytest.mark.slow
def test_a_caller_killed_while_the_rank_server_starts_leaves_no_files(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = tmp_path / "caller.py"
    script.write_text(
        textwrap.dedent(
            """
            from databricks.air import distributed

            @distributed(num_accelerators=2, accelerator_type="CPU")
            def work(secret):
                return len(secret)

            work.distributed("a secret argument")
            """
        )
    )
    marker = uuid.uuid4().hex
    caller = subprocess.Popen(
        [sys.executable, str(script)],
        env={**os.environ, "TMPDIR": str(scratch), "AIR_TEST_MARKER": marker},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The payload is written before the rank server has finished importing torch.
        assert wait_until(lambda: any(scratch.glob("databricks-air-call-*/arguments.bin")), 60)
        caller.send_signal(signal.SIGKILL)
        caller.wait()
        assert wait_until(lambda: not list(scratch.iterdir()), 10), list(scratch.rglob("*"))
        assert wait_until(lambda: not processes_with_marker(marker), 5)
    finally:
        caller.kill()
        for process in processes_with_marker(marker):
            process.kill()
