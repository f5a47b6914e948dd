"""What machine a benchmark ran on, printed at the top of every benchmark's report."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
from typing import Dict


def machine() -> Dict[str, str]:
    """Date, CPUs, CPU model, platform, Python and torch versions, and the load average at start."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpus": f"{os.cpu_count()} (usable: {affinity})",
        "cpu model": model or "unknown",
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
        "load avg": " ".join(f"{x:.2f}" for x in os.getloadavg()) + "  (1/5/15 min, at start)",
    }


def print_machine() -> None:
    """Print :func:`machine`, one line each, then a blank line: the head of every benchmark's report."""
    for key, value in machine().items():
        print(f"  {key:<11} {value}")
    print()
