"""The engine's process helpers (``_engine/processes.py``), with real processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from databricks.air._engine.processes import free_port, kill_group, python_command
from process_helpers import wait_until

ENTRY = """
import os, sys, time

def main():
    print("argv", sys.argv[1:], flush=True)
    if sys.argv[1:2] == ["sleep"]:
        time.sleep(60)
"""


@pytest.fixture
def entry(tmp_path: Path) -> dict:
    """A module ``air_entry`` with a ``main()``, importable through ``PYTHONPATH``; the environment to use."""
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "air_entry.py").write_text(textwrap.dedent(ENTRY))
    return {**os.environ, "PYTHONPATH": str(modules)}


def test_a_fresh_interpreter_runs_the_modules_main_with_its_arguments(entry: dict) -> None:
    command = python_command("air_entry", ["a", "b c"])
    assert command[:3] == [sys.executable, "-u", "-c"]
    done = subprocess.run(command, env=entry, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "argv ['a', 'b c']\n"), done.stderr


def test_the_working_directory_is_left_off_sys_path(entry: dict, tmp_path: Path) -> None:
    # `python -c` puts the working directory first on sys.path: a user's file there must not shadow ours.
    (tmp_path / "air_entry.py").write_text("def main():\n    raise SystemExit('imported from the working dir')\n")
    done = subprocess.run(
        python_command("air_entry"), env=entry, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "argv []\n"), done.stderr


def test_a_child_asked_to_die_with_its_parent_dies_when_the_parent_is_killed(entry: dict) -> None:
    parent_source = textwrap.dedent(
        """
        import os, subprocess, sys, time
        from databricks.air._engine.processes import python_command
        child = subprocess.Popen(python_command("air_entry", ["sleep"], parent_pid=os.getpid()))
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_source], env=entry, stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert parent.stdout.readline() == "argv ['sleep']\n"  # the child runs its main() (it shares the pipe)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_until(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, timeout=30)
    finally:
        parent.kill()
        parent.wait()
        if child is not None and child.is_running():
            child.kill()


def test_a_child_whose_parent_is_already_gone_exits_before_running_anything(entry: dict) -> None:
    # The child's parent is this process; any other pid stands for a parent that died before the child asked.
    done = subprocess.run(
        python_command("air_entry", parent_pid=os.getppid()), env=entry, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (1, "")


def test_kill_group_reaches_every_process_of_the_group_and_a_gone_group_is_no_error() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"],
        start_new_session=True,
    )
    try:
        assert wait_until(lambda: len(psutil.Process(leader.pid).children()) == 1, timeout=30)
        (sleeper,) = psutil.Process(leader.pid).children()
        kill_group(leader.pid, signal.SIGKILL)
        assert leader.wait(timeout=30) == -signal.SIGKILL
        assert wait_until(lambda: not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE, timeout=30)
    finally:
        leader.kill()
        leader.wait()
    kill_group(leader.pid, signal.SIGKILL)  # gone: nothing happens


def test_free_port_can_be_listened_on() -> None:
    port = free_port("127.0.0.1")
    assert 0 < port < 65536
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
