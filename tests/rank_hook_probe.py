"""A rank hook for tests (named in ``DATABRICKS_AIR_RANK_HOOKS``): it notes, as files in ``$AIR_HOOK_PROBE_DIR``,
when each rank started and ended, and how often it ended."""

from __future__ import annotations

import os
from pathlib import Path


def _note(what: str) -> None:
    path = Path(os.environ["AIR_HOOK_PROBE_DIR"]) / f"{what}_{os.environ['RANK']}"
    with path.open("a") as stream:
        stream.write(f"{os.getpid()}\n")


def rank_started() -> None:
    _note("started")


def rank_ending() -> None:
    _note("ended")
