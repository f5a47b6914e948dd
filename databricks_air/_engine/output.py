"""Where rank output goes: a per-rank log file always, and the caller's ``sys.stdout``/``sys.stderr`` live.

By default only rank 0 is shown, exactly as written (a ``\\r`` progress bar animates, and the text lands in the
notebook cell because it is written to ``sys.stdout``, not to the kernel's file descriptor). With
``show_all_ranks`` every rank is shown a whole line at a time, each line prefixed ``[rank N]``, so that ranks'
lines never mix.
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Callable, Dict, Optional, TextIO

from databricks.air._call_folder import CallFolder

_TAIL_BYTES = 256 * 1024


class RankOutput:
    """Output of one rank: two pipes in, one log file and (maybe) the caller's streams out."""

    def __init__(
        self, rank: int, log_path: str, echo: bool, prefix: Optional[str], live: Optional[Callable[[], bool]] = None
    ) -> None:
        self.rank = rank
        self._live = live
        self.log_path = log_path
        self._log = open(log_path, "ab", buffering=0)
        self._echo = echo
        self._prefix = prefix
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        self._partial_line = {"stdout": "", "stderr": ""}

    def feed(self, stream_name: str, data: bytes) -> None:
        """Record ``data`` read from the rank's ``stream_name`` ("stdout" or "stderr")."""
        self._log.write(data)
        if self._echo:
            self._show(stream_name, self._decoders[stream_name].decode(data))

    def finish(self) -> None:
        """Flush what is left (a last line without newline) and close the log file."""
        if self._echo:
            for name, decoder in self._decoders.items():
                rest = decoder.decode(b"", final=True)
                if self._prefix:
                    rest = self._partial_line[name] + rest
                    self._partial_line[name] = ""
                    if rest and not rest.endswith("\n"):
                        rest += "\n"
                self._show(name, rest)
        self._log.close()

    def _show(self, stream_name: str, text: str) -> None:
        if self._prefix:
            text = self._whole_lines(stream_name, text)
        if not text or (self._live is not None and not self._live()):
            return
        target: Optional[TextIO] = sys.stdout if stream_name == "stdout" else sys.stderr
        if target is None:  # e.g. pythonw: nowhere to show it; the log file has it
            return
        target.write(text)
        target.flush()

    def _whole_lines(self, stream_name: str, text: str) -> str:
        """The complete lines of ``text`` (after what was pending), prefixed; keeps the incomplete rest."""
        lines = (self._partial_line[stream_name] + text).split("\n")
        self._partial_line[stream_name] = lines.pop()
        return "".join(f"{self._prefix}{line}\n" for line in lines)


def make_outputs(
    log_dir: str, world_size: int, show_all_ranks: bool, live: Optional[Callable[[], bool]] = None
) -> Dict[int, RankOutput]:
    """One :class:`RankOutput` per rank, logging to ``<log_dir>/rank_<r>.txt``; shown ranks are shown while ``live()``
    (``None``: always)."""
    folder = CallFolder(log_dir)
    return {
        rank: RankOutput(
            rank,
            folder.rank_log(rank),
            echo=show_all_ranks or rank == 0,
            prefix=f"[rank {rank}] " if show_all_ranks else None,
            live=live,
        )
        for rank in range(world_size)
    }


def log_tail(log_path: str, lines: int = 50) -> str:
    """The last ``lines`` lines of a rank's log (decoded leniently)."""
    try:
        with open(log_path, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - _TAIL_BYTES))
            data = stream.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return "\n".join(text.splitlines()[-lines:])
