"""The private per-call directory shared by the caller and its ranks, and what lies in it.

Unpickling runs code, so the directory is created readable by its owner only (mode 0700) and removed when the
call ends. It holds:

* ``launch.pkl``: how each rank sets itself up (environment, working directory, ``sys.path``, ``sys.argv``);
* ``function.pkl`` and ``arguments.bin``: the payload;
* ``result_<rank>.bin``: what each rank returned, or how it failed;
* ``stacks_<rank>.txt`` and ``probe_<rank>.sock``: where a rank writes its stacks on a signal, and the socket on
  which it answers questions about where it is (:mod:`databricks.air._engine.rank_probe`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import tempfile
from typing import Dict, List

CALL_DIR_PREFIX = "databricks-air-call-"


@dataclasses.dataclass(frozen=True)
class RankSetup:
    """What every rank reproduces of the caller before it runs the function."""

    environ: Dict[str, str]
    """The caller's environment at call time, plus the launcher's common variables."""
    rank_environ: List[Dict[str, str]]
    """Per global rank: the variables that differ between ranks (``RANK``, ``LOCAL_RANK``...)."""
    cwd: str
    sys_path: List[str]
    argv: List[str]
    """The caller's ``sys.argv``."""


class CallFiles:
    """Paths of one call's private directory."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls) -> "CallFiles":
        """Make a new private directory (``tempfile.mkdtemp`` creates it with mode 0700)."""
        return cls(tempfile.mkdtemp(prefix=CALL_DIR_PREFIX))

    @property
    def setup(self) -> str:
        return os.path.join(self.path, "launch.pkl")

    @property
    def function(self) -> str:
        return os.path.join(self.path, "function.pkl")

    @property
    def arguments(self) -> str:
        return os.path.join(self.path, "arguments.bin")

    def result(self, rank: int) -> str:
        return os.path.join(self.path, f"result_{rank}.bin")

    def stacks(self, rank: int) -> str:
        return os.path.join(self.path, f"stacks_{rank}.txt")

    def probe(self, rank: int) -> str:
        return os.path.join(self.path, f"probe_{rank}.sock")

    def write_setup(self, setup: RankSetup) -> None:
        with open(self.setup, "wb") as stream:
            pickle.dump(setup, stream, protocol=pickle.HIGHEST_PROTOCOL)

    def read_setup(self) -> RankSetup:
        with open(self.setup, "rb") as stream:
            return pickle.load(stream)

    def write_bytes(self, path: str, data: bytes) -> None:
        with open(path, "wb") as stream:
            stream.write(data)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
