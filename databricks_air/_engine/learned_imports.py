"""Modules a rank server learns from its ranks: torch's lazily imported parts, imported once the calls show use of them.

``DistributedDataParallel``'s constructor imports ``torch._dynamo`` (about 800 modules, a second of CPU time);
FSDP, ``torch.distributed.checkpoint`` and this package's data helpers import much of it too. A rank forked from
a server that lacks them imports them again, in every rank of every call: a warm call of two DDP ranks took 1.1 s
where it takes 0.1 s with them loaded. Preloading them always would charge that second to every server, used for
DDP or not, and to the first call of every script.

So each rank forked from a server tells it, as it ends, which of :data:`WORTH_PRELOADING` it imported (a line on
a pipe the server made); the server imports those when it is next idle (half a second without a request or a
rank), or before it forks the next call's ranks, and later calls' ranks start with them loaded. A script that
makes one call and exits never pays for the import.

They read environment variables when imported (``TORCHINDUCTOR_*``, ``TORCHDYNAMO_*``...), so those variables are
part of the server's start-up fingerprint (``rank_server_handle``): a call made under other values gets a server
of its own. None of them reads the rank, starts a thread or touches CUDA when imported.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import List, Optional, Set

from databricks.air._engine.frozen_imports import import_for_life

WORTH_PRELOADING = (
    "torch._dynamo",
    "torch.distributed.fsdp",
    "torch.distributed.checkpoint",
    "databricks.air.data",
)
"""Modules worth importing in the server once a rank has used them: costly, free of rank and thread state at import."""

_REPORT_BYTES = 4096  # each rank's line is far shorter than PIPE_BUF, so ranks' lines never interleave


def report(fd: Optional[int]) -> None:
    """In a forked rank that is ending: write the names of :data:`WORTH_PRELOADING` it imported to its server's
    pipe ``fd`` (never blocks: a full pipe loses the line, and the server learns from a later rank)."""
    if fd is None:
        return
    loaded = [name for name in WORTH_PRELOADING if name in sys.modules]
    if not loaded:
        return
    try:
        os.write(fd, (",".join(loaded) + "\n").encode())
    except OSError:
        pass


class LearnedImports:
    """The server's side: the pipe its forked ranks report on, and what they used that it has not imported yet."""

    def __init__(self) -> None:
        # Close-on-exec: a rank keeps the write end across fork, an exec'd program never sees it. Non-blocking: a
        # rank never waits on it as it exits, and the server reads whatever is there without waiting.
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.pending: Set[str] = set()
        self._tried: Set[str] = set()

    def read(self) -> None:
        """Take the ranks' reports off the pipe."""
        chunks: List[bytes] = []
        while True:
            try:
                chunk = os.read(self.read_fd, _REPORT_BYTES)
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                raise
            if not chunk:
                break
            chunks.append(chunk)
        for name in b"".join(chunks).decode(errors="replace").replace("\n", ",").split(","):
            if name in WORTH_PRELOADING and name not in sys.modules and name not in self._tried:
                self.pending.add(name)

    def import_pending(self) -> None:
        """Import what ranks used (each at most once: a module that fails here is left to the ranks)."""
        self._tried |= self.pending
        import_for_life(sorted(self.pending))  # a module that fails here: a rank that needs it sees the error
        self.pending.clear()

    def close_in_rank(self) -> None:
        """In a forked rank: the read end is the server's alone."""
        os.close(self.read_fd)
