"""ANSI colours for diffs and report lines, only where a person reads them.

``--color auto`` (the default) colours a stream only when it is a terminal and ``NO_COLOR`` is not set
(https://no-color.org); ``always`` and ``never`` do what they say. Colour codes wrap whole lines or words and never
change the text otherwise: no wrapping, no markup interpretation.
"""

from __future__ import annotations

import os
from typing import TextIO

CHOICES = ("auto", "always", "never")
_RESET = "\x1b[0m"
_STYLES = {
    "bold": "\x1b[1m",
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "magenta": "\x1b[35m",
    "cyan": "\x1b[36m",
    "bold red": "\x1b[1;31m",
}


def wanted(choice: str, stream: TextIO) -> bool:
    """Whether ``stream`` gets colours under ``--color choice``."""
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


class Palette:
    """Paints text in a style when colours are on, and returns it as it is otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def paint(self, text: str, style: str) -> str:
        if not self.enabled or not text:
            return text
        return f"{_STYLES[style]}{text}{_RESET}"
