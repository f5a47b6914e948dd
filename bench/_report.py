"""The rows of a benchmark's report: a measurement's median, minimum and maximum, and a target's verdict."""

from __future__ import annotations

import statistics
from typing import Sequence


def median_row(label: str, values: Sequence[float], width: int, digits: int = 8) -> str:
    """``label`` (padded to ``width``), how many values, then their median, minimum and maximum."""
    figures = (statistics.median(values), min(values), max(values))
    return f"  {label:<{width}} {len(values):>3} " + " ".join(f"{figure:>{digits}.3f}" for figure in figures)


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"
