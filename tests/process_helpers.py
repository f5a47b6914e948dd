"""Helpers for tests that look for leftover processes or wait for something to happen."""

from __future__ import annotations

import time
from typing import Callable, List

import psutil


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
