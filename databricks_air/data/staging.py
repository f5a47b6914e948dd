"""Where a cached copy is written before it gets its final name, so that no process ever sees it half-written.

On Linux the copy goes into an unnamed file (``O_TMPFILE``) in the destination's folder, which is linked to its
final name once complete. Creating a named temporary and renaming it takes the folder's lock twice; linking an
unnamed file takes it once. When many I/O threads fill one folder that lock is most of the kernel's time (measured:
16 threads filling one ext4 folder with 16 KiB files spent 440-600 us of system time per file with named
temporaries, 90-320 us with unnamed ones). A process killed mid-copy leaves nothing behind at all.

Where unnamed files are not available (another OS, a file system without them, no ``/proc``), the copy goes to a
hidden ``.<name>.<pid>.<thread>.part`` next to the destination and is renamed into place.
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Optional

TEMP_SUFFIX = ".part"

_O_TMPFILE = getattr(os, "O_TMPFILE", None)
# Errors that mean "this folder or kernel has no unnamed files" rather than "this copy failed".
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL}
_unnamed_available: Optional[bool] = None if _O_TMPFILE is not None and os.path.isdir("/proc/self/fd") else False


def is_temporary(name: str) -> bool:
    """True for the hidden name of a copy in progress (what eviction and clean-up skip)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


class StagedFile:
    """A file being filled for ``destination``. Write into :attr:`path` (open it for writing), then
    :meth:`link` or :meth:`replace` it into place, or :meth:`discard` it."""

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self._fd: Optional[int] = _open_unnamed(os.path.dirname(destination))
        if self._fd is not None:
            self.path = f"/proc/self/fd/{self._fd}"  # opening this reopens the unnamed file itself
        else:
            folder, name = os.path.split(destination)
            self.path = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")

    def set_times(self, atime_ns: int, mtime_ns: int) -> None:
        """Set the file's access and modification times."""
        os.utime(self._fd if self._fd is not None else self.path, ns=(atime_ns, mtime_ns))

    def link(self) -> bool:
        """Give the file its final name if that name is free; False (and nothing changed) if it is taken."""
        try:
            self._link_to(self.destination)
        except FileExistsError:
            return False
        self._release()
        return True

    def replace(self) -> None:
        """Give the file its final name, atomically replacing the file there."""
        if self._fd is not None:
            # An unnamed file cannot be renamed: name it first, then rename that name over the destination.
            folder, name = os.path.split(self.destination)
            named = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
            _unlink_quietly(named)
            self._link_to(named)
            self._close()
            os.replace(named, self.destination)
        else:
            os.replace(self.path, self.destination)

    def discard(self) -> None:
        """Drop the file (a failed or unneeded copy)."""
        if self._fd is not None:
            self._close()
        else:
            _unlink_quietly(self.path)

    def _link_to(self, name: str) -> None:
        if self._fd is not None:
            # linkat(AT_SYMLINK_FOLLOW) on the /proc link is how an unnamed file gets a name; os.link only calls
            # linkat (rather than link, which would link the /proc entry itself) when it is given a dir fd, which
            # an absolute path then ignores.
            os.link(self.path, name, src_dir_fd=self._fd, follow_symlinks=True)
        else:
            os.link(self.path, name)

    def _release(self) -> None:
        if self._fd is not None:
            self._close()
        else:
            _unlink_quietly(self.path)

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _open_unnamed(folder: str) -> Optional[int]:
    global _unnamed_available
    if _unnamed_available is False:
        return None
    try:
        fd = os.open(folder, _O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o644)  # type: ignore[operator]
    except OSError as error:
        if error.errno not in _NO_TMPFILE or not os.path.isdir(folder):
            raise
        _unnamed_available = False  # the cache's file system has none: stop asking
        return None
    if _unnamed_available is None:
        # The first time, name a throwaway file (once named, an unnamed file cannot be linked again).
        _unnamed_available = _can_link(fd, folder)
        os.close(fd)
        return _open_unnamed(folder)
    return fd


def _can_link(fd: int, folder: str) -> bool:
    """Whether an unnamed file can be given a name here (a sandbox may allow the one and not the other)."""
    probe = os.path.join(folder, f".probe.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
    try:
        os.link(f"/proc/self/fd/{fd}", probe, src_dir_fd=fd, follow_symlinks=True)
    except OSError:
        return False
    _unlink_quietly(probe)
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
