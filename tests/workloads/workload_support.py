"""Helpers of the workload tests: write a workload file, run the real ``air`` command, wait for a run's state."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import yaml

from process_helpers import run_or_show_stacks

AIR = str(Path(sys.executable).with_name("air"))
CPU2 = {"accelerator_type": "CPU", "num_accelerators": 2}


def write_workload(folder: Path, name: str = "workload.yaml", **fields: Any) -> Path:
    """A workload file: ``experiment_name``, 2 CPU ranks and ``max_retries: 0`` unless given."""
    document = {"experiment_name": "test-workload", "compute": dict(CPU2), "max_retries": 0, **fields}
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def air(
    *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120, stdin: Optional[str] = None
) -> subprocess.CompletedProcess:
    """The ``air`` console script, as a user runs it (text out); stacks of what hangs past ``timeout``."""
    with tempfile.TemporaryFile() as given:
        given.write((stdin or "").encode())
        given.seek(0)
        done = run_or_show_stacks(
            [AIR, *args],
            timeout=timeout,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=given if stdin is not None else subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    done.stdout = done.stdout.decode(errors="replace")
    done.stderr = done.stderr.decode(errors="replace")
    return done


def envelope(done: subprocess.CompletedProcess) -> Dict[str, Any]:
    """The JSON envelope ``air -o json`` printed (its last line)."""
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"no output; stderr:\n{done.stderr}"
    return json.loads(lines[-1])


def events(done: subprocess.CompletedProcess) -> List[Dict[str, Any]]:
    """Every JSON line ``air -o json`` printed."""
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def submit(path: Path, *args: str, env: Optional[Dict[str, str]] = None) -> int:
    """``air run -f PATH -o json``; the new run's id."""
    done = air("run", "-f", str(path), "-o", "json", *args, env=env)
    assert done.returncode == 0, done.stderr + done.stdout
    return int(envelope(done)["data"]["run_id"])


def state(run_id: int) -> Any:
    from databricks.air.workloads import runs

    return runs.get(run_id).state


def wait_for(run_id: int, predicate: Callable[[Any], bool], timeout: float = 60) -> Any:
    """Wait until the run's state satisfies ``predicate``; return that state (fail with it on timeout)."""
    deadline = time.monotonic() + timeout
    current = state(run_id)
    while not predicate(current):
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {current.status} after {timeout} s: {current}")
        time.sleep(0.05)
        current = state(run_id)
    return current


def wait_for_end(run_id: int, timeout: float = 60) -> Any:
    return wait_for(run_id, lambda s: s.terminal, timeout)


def make_wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel, made by hand (nothing downloaded, no build backend needed)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path
