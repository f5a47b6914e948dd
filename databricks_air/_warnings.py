"""Attributing warnings to the user's own line, however deep inside ``databricks.air`` they are raised."""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Optional

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def user_stacklevel() -> int:
    """The ``stacklevel`` for :func:`warnings.warn` that points at the first frame outside this package.

    Counted from the caller of this function (``stacklevel=1`` is the frame calling ``warnings.warn``).
    """
    frame: Optional[FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep):
        frame = frame.f_back
        level += 1
    return level
