"""A line that says something slow is under way, where the user watches (a terminal, a notebook cell), and goes
away when it is done.

Output to a file or a pipe (a CI log, ``> out.txt``) gets nothing: a line there would stay, and a call prints at most
three lines of its own.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator, Optional, TextIO

from databricks.air import _notebook


def _watched(stream: TextIO) -> bool:
    try:
        return stream.isatty() or _notebook.in_jupyter_kernel()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


@contextlib.contextmanager
def transient(note: Optional[str], stream: Optional[TextIO] = None) -> Iterator[None]:
    """Show ``note`` (if not ``None``) on ``stream`` (stderr) while the block runs, then erase it."""
    stream = sys.stderr if stream is None else stream
    shown = note if note is not None and _watched(stream) else None
    if shown is not None:
        stream.write(shown)
        stream.flush()
    try:
        yield
    finally:
        if shown is not None:
            stream.write("\r" + " " * len(shown) + "\r")  # a notebook's output area has no ANSI erase
            stream.flush()
