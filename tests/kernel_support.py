"""A real Jupyter kernel for tests: a private kernel spec of this interpreter, notebooks written and run with nbclient,
and the processes a kernel leaves. Shared by the tests that run notebooks (``test_notebook.py``,
``test_rank_start.py``, ``test_frameworks.py``, ``migrate/test_am2_notebook_e2e.py``).

The kernel's environment carries a unique ``AIR_TEST_MARKER`` (the ``marker`` fixture), which every process below it
inherits (the rank server, the ranks, what the ranks start), so leftovers can be found with
:func:`process_helpers.processes_with_marker`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Awaitable, Callable, Dict, Iterator, List

import nbformat
import psutil
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from process_helpers import processes_with_marker

CELL_TIMEOUT = 120  # seconds per cell; every cell here takes a few seconds
RANK_SERVER = "databricks.air._engine.rank_server"


@pytest.fixture(scope="session")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    """A ``python3`` kernel spec that runs this interpreter, and only it.

    A private kernel directory, rather than whatever ``python3`` spec ``jupyter_path()`` finds first: a user's or the
    system's spec may start another Python, without this project installed.
    """
    root = tmp_path_factory.mktemp("kernels")
    (root / "python3").mkdir()
    (root / "python3" / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (databricks-air-oss tests)",
                "language": "python",
                "interrupt_mode": "signal",  # as Jupyter's interrupt button: SIGINT to the kernel's process group
            }
        )
    )
    return KernelSpecManager(kernel_dirs=[str(root)], ensure_native_kernel=False)


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique ``AIR_TEST_MARKER`` for the kernel; whatever still carries it afterwards is killed."""
    value = uuid.uuid4().hex
    yield value
    for process in processes_with_marker(value):
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def kernel_env(tmp_path: Path, marker: str, **extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    for name in (
        "DATABRICKS_AIR_ACCELERATOR_TYPE",
        "DATABRICKS_AIR_SHOW_ALL_RANKS",
        "DATABRICKS_AIR_START_METHOD",
        "MASTER_ADDR",
        "MASTER_PORT",
        "MLFLOW_RUN_ID",
        "MLFLOW_TRACKING_URI",
        "MLFLOW_EXPERIMENT_ID",
        "MLFLOW_EXPERIMENT_NAME",
    ):
        env.pop(name, None)
    env.update(
        DATABRICKS_AIR_LOG_DIR=str(tmp_path / "logs"),
        DATABRICKS_AIR_MLFLOW="0",
        AIR_TEST_MARKER=marker,
        IPYTHONDIR=str(tmp_path / "ipython"),  # no history or profile in the user's ~/.ipython
        PYDEVD_DISABLE_FILE_VALIDATION="1",  # quiets debugpy's start-up warning
    )
    env.update(extra)
    return env


def write_notebook(path: Path, *sources: str) -> nbformat.NotebookNode:
    """Write a notebook of code cells (each source dedented) to ``path``; return it as read back."""
    nb = new_notebook(cells=[new_code_cell(textwrap.dedent(source).strip()) for source in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


def notebook_client(nb: nbformat.NotebookNode, cwd: Path, kernel_specs: KernelSpecManager) -> NotebookClient:
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_specs)
    return NotebookClient(
        nb,
        km=km,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        startup_timeout=60,
        resources={"metadata": {"path": str(cwd)}},  # the kernel's working directory
    )


def kernel_pid(client: NotebookClient) -> int:
    return client.km.provisioner.process.pid


def rank_servers(kernel: psutil.Process) -> List[psutil.Process]:
    found = []
    for child in kernel.children():
        try:
            if RANK_SERVER in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def live_children(process: psutil.Process) -> List[psutil.Process]:
    alive = []
    for child in process.children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def texts(cell: nbformat.NotebookNode, name: str) -> str:
    """Everything a cell wrote to one stream ("stdout" or "stderr"), in order."""
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == name)


def all_output_text(nb: nbformat.NotebookNode) -> str:
    return "".join(
        o.get("text", "") + json.dumps(o.get("data", {})) + "".join(o.get("traceback", []))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )


async def until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """:func:`process_helpers.wait_until` for inside the event loop, where nbclient reads the kernel's messages."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(interval)
    return predicate()


def run_in_kernel(
    client: NotebookClient, env: Dict[str, str], scenario: Callable[[NotebookClient], Awaitable[None]]
) -> None:
    """Start the kernel, run ``scenario(client)`` against it, then shut the kernel down (if it is still alive)."""

    async def main() -> None:
        async with client.async_setup_kernel(env=env, cleanup_kc=True):
            await scenario(client)

    asyncio.run(main())
