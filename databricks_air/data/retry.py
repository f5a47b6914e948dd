"""Bounded retries of volume operations: a few attempts, a short total time, and none for definite answers.

A FUSE-mounted volume can fail transiently (``EIO``, ``ETIMEDOUT``, a stale handle); such errors are retried with
doubling delays, up to ``attempts`` tries and ``total_seconds`` in all. An answer that another try cannot change
(the file does not exist, access is denied, a folder where a file was expected, the local disk is full) is
raised at once.
"""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

_log = logging.getLogger("databricks.air.data")

T = TypeVar("T")

_DEFINITE = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError)
_DEFINITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENAMETOOLONG, errno.EINVAL}


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a failing volume operation is tried again."""

    attempts: int = 5
    total_seconds: float = 10.0
    first_delay: float = 0.1

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"retries must be an int >= 1 (the number of attempts), not {self.attempts!r}")
        if not isinstance(self.total_seconds, (int, float)) or self.total_seconds < 0:
            raise ValueError(f"retry_seconds must be a number >= 0, not {self.total_seconds!r}")


def is_worth_retrying(error: BaseException) -> bool:
    """True for errors that a later attempt may not see again."""
    if not isinstance(error, OSError) or isinstance(error, _DEFINITE):
        return False
    return error.errno not in _DEFINITE_ERRNOS


def call_with_retries(operation: Callable[[], T], what: str, policy: RetryPolicy) -> T:
    """Run ``operation``; retry transient ``OSError``s within ``policy``; re-raise the last error otherwise.

    The error that finally escapes is the original one (its class and errno intact); its ``attempts`` and
    ``seconds`` attributes say how many tries were made over how long.
    """
    started = time.monotonic()
    delay = policy.first_delay
    for attempt in range(1, policy.attempts + 1):
        try:
            return operation()
        except OSError as error:
            elapsed = time.monotonic() - started
            if not is_worth_retrying(error) or attempt == policy.attempts or elapsed + delay > policy.total_seconds:
                error.attempts, error.seconds = attempt, elapsed  # type: ignore[attr-defined]
                raise
            _log.warning(
                "%s failed (%s); trying again in %.2f s (attempt %d of %d)",
                what,
                error,
                delay,
                attempt,
                policy.attempts,
            )
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # the loop either returns or raises
