"""Helpers for tests that look for leftover processes or wait for something to happen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any, Callable, List, Sequence

import psutil
import pytest


def server_descendants() -> List[psutil.Process]:
    """Every process below this process's rank servers (ranks, their children)."""
    found = []
    for child in psutil.Process().children():
        try:
            if "databricks.air._engine.rank_server" in " ".join(child.cmdline()):
                found += child.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
    return [p for p in found if _alive(p)]


def processes_with_marker(marker: str) -> List[psutil.Process]:
    """Live processes whose environment contains ``AIR_TEST_MARKER=<marker>``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("AIR_TEST_MARKER") == marker and _alive(process):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def run_or_show_stacks(args: Sequence[str], *, timeout: float, **popen: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(args, timeout=timeout, **popen)`` for a process that should never hang: if it is still
    running at the timeout, the Python stacks of it and of every process below it (ranks, workers) are taken with
    py-spy before they are killed, and the test fails with them and the tail of the output. Keep ``timeout`` under
    the test's own pytest timeout, which would kill the test without any of this."""
    with subprocess.Popen(args, **popen) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = _stacks_of_tree(process.pid)
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.NoSuchProcess:  # it ended just now; its children, if any, die with their parent
                children = []
            for child in children:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
            process.kill()
            stdout, _ = process.communicate()
            output = stdout.decode(errors="replace") if isinstance(stdout, bytes) else (stdout or "")
            pytest.fail(
                f"{' '.join(map(str, args))} still running after {timeout:g} s.\n\nLast output:\n"
                f"{output[-6000:]}\n\nStacks:\n{stacks}"
            )
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def _stacks_of_tree(pid: int) -> str:
    py_spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(py_spy):
        return "(py-spy is not installed: no stacks)"
    try:
        root = psutil.Process(pid)
        processes = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return "(the process is gone)"
    parts = []
    for process in processes:
        try:
            command = " ".join(process.cmdline())[:200]
            dump = subprocess.run(
                [py_spy, "dump", "--pid", str(process.pid)], capture_output=True, text=True, timeout=30
            )
        except (psutil.Error, subprocess.TimeoutExpired) as error:
            parts.append(f"--- {process.pid}: {error!r}")
            continue
        parts.append(f"--- {process.pid}: {command}\n{dump.stdout or dump.stderr}")
    return "\n".join(parts)
