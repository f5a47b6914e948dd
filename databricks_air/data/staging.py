"""Where a cached copy is written before it gets its final name, so that no process ever sees it half-written.

On Linux the copy goes into an unnamed file (``O_TMPFILE``) in the destination's folder, which is linked to its
final name once complete. Creating a named temporary and renaming it takes the folder's lock twice; linking an
unnamed file takes it once. When many I/O threads fill one folder that lock is most of the kernel's time (measured:
16 threads filling one ext4 folder with 16 KiB files spent 440-600 us of system time per file with named
temporaries, 90-320 us with unnamed ones). A process killed mid-copy leaves nothing behind at all.

Where unnamed files are not available (another OS, a file system without them, no ``/proc``), the copy goes to a
hidden ``.<name>.<pid>.<thread>.part`` next to the destination and is renamed into place. An unnamed file that
cannot be given a name after all (a sandbox that refuses ``linkat`` through ``/proc``) is copied to such a hidden
file, and unnamed files are not used again in that process.
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
            self.path = _hidden_name(destination)

    def set_times(self, atime_ns: int, mtime_ns: int) -> None:
        """Set the file's access and modification times."""
        os.utime(self._fd if self._fd is not None else self.path, ns=(atime_ns, mtime_ns))

    def link(self) -> bool:
        """Give the file its final name if that name is free; False (and nothing changed) if it is taken."""
        if self._fd is not None:
            try:
                _link_unnamed(self._fd, self.destination)
            except FileExistsError:
                return False
            except OSError:
                self._become_named()  # this file system will not name an unnamed file: through a hidden one
            else:
                self._close()
                return True
        try:
            os.link(self.path, self.destination)
        except FileExistsError:
            return False
        _unlink_quietly(self.path)
        return True

    def replace(self) -> None:
        """Give the file its final name, atomically replacing the file there."""
        if self._fd is not None:
            self._become_named()  # an unnamed file cannot be renamed over another
        os.replace(self.path, self.destination)

    def discard(self) -> None:
        """Drop the file (a failed or unneeded copy)."""
        if self._fd is not None:
            self._close()
        else:
            _unlink_quietly(self.path)

    def _become_named(self) -> None:
        """Give the unnamed file its hidden temporary name, by a link or else by copying its bytes."""
        global _unnamed_available
        assert self._fd is not None
        named = _hidden_name(self.destination)
        _unlink_quietly(named)
        try:
            _link_unnamed(self._fd, named)
        except OSError:
            _unnamed_available = False  # stop making files that cannot be named here
            _copy_out(self._fd, named)
        self._close()
        self.path = named

    def _close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _hidden_name(destination: str) -> str:
    folder, name = os.path.split(destination)
    return os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")


def _link_unnamed(fd: int, name: str) -> None:
    # linkat(AT_SYMLINK_FOLLOW) on the /proc link is how an unnamed file gets a name; os.link only calls linkat
    # (rather than link, which would link the /proc entry itself) when it is given a dir fd, which an absolute
    # path then ignores.
    os.link(f"/proc/self/fd/{fd}", name, src_dir_fd=fd, follow_symlinks=True)


def _copy_out(fd: int, name: str) -> None:
    """Copy the unnamed file ``fd`` to a new file ``name``, with its times."""
    info = os.fstat(fd)
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        offset = 0
        while offset < info.st_size:
            chunk = os.pread(fd, min(info.st_size - offset, 8 * 1024 * 1024), offset)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            offset += len(chunk)
        os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
    except BaseException:
        os.close(out)
        _unlink_quietly(name)
        raise
    os.close(out)


def _open_unnamed(folder: str) -> Optional[int]:
    global _unnamed_available
    if _unnamed_available is False:
        return None
    try:
        fd = os.open(folder, _O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)  # type: ignore[operator]
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
        _link_unnamed(fd, probe)
    except OSError:
        return False
    _unlink_quietly(probe)
    return True


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
