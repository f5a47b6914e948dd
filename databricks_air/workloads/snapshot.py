"""The code snapshot: ``code_source`` copied into the run's folder when the run is submitted.

So editing, checking out or deleting files while a run waits or runs changes nothing in it (and each retry starts
from the same code). A working-tree snapshot copies ``root_path`` (or its ``include_paths``) without ``.git``,
AppleDouble files (``._*``), what ``.gitignore`` files ignore (:mod:`.gitignore`), and this tool's own home; a
path named in ``include_paths`` is copied even if ignored (inside it, the ignore rules apply). A ``git`` snapshot
is ``git archive`` of the branch's or commit's tree at ``root_path`` (tracked files only).

What is copied, and how:

* regular files by content, sparsely: the holes of a sparse file stay holes in the copy (``SEEK_DATA`` /
  ``SEEK_HOLE``, then ``copy_file_range``), so a 1 GiB file of holes costs nothing;
* a symbolic link as a link, never followed, when it leads to a place under ``root_path`` (rewritten relative, so
  that it points into the snapshot); one that leads out of ``root_path`` is left out, with a note (its target
  would not be in the snapshot, and what follows links later, such as the Ray backend's package, would copy it).
  A link named in ``include_paths`` is followed (validation made sure that it leads to a place under
  ``root_path``): its file or folder is copied under its name;
* special files (FIFOs, sockets, devices) are left out, with a note: reading a FIFO would block, a device never
  ends.

:func:`survey` walks what :func:`take` will copy, with the same walk, before the run is recorded: it fails for
what would fail the copy (a git pin that names no commit, an include path missing from it, a file that cannot be
read) and returns the notes above, and one when the snapshot is larger than :data:`LARGE_SNAPSHOT_BYTES` (it is
copied for every run), naming the largest files.
"""

from __future__ import annotations

import dataclasses
import errno
import heapq
import io
import os
import shutil
import stat
import subprocess
import tarfile
from typing import Iterator, List, Optional, Sequence, Tuple

from databricks.air.workloads import paths
from databricks.air.workloads.errors import WorkloadFileError
from databricks.air.workloads.gitignore import IgnoreRules, rules_above
from databricks.air.workloads.workload import CodeSource

LARGE_SNAPSHOT_BYTES = 1 << 30
"""A snapshot larger than this gets a note naming its largest files."""
_NAMED = 5
"""At most this many paths in one note."""
_FOLDER, _FILE, _LINK, _SPECIAL, _OUTSIDE = "folder", "file", "link", "special", "outside"


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One thing the walk found: what it is, where it goes in the snapshot, where it is."""

    kind: str
    relative: str
    """``/``-separated, from root_path."""
    path: str
    size: int = 0
    target: str = ""
    """A link: what the copy points at. Left out: what it is (a FIFO, where the link leads)."""


def take(source: CodeSource, destination_parent: str, field: Optional[str] = None) -> str:
    """Snapshot ``source`` into ``destination_parent/<root folder's name>``; return that folder."""
    field = field or source.field
    name = os.path.basename(source.root_path.rstrip(os.sep)) or "code"
    destination = os.path.join(destination_parent, name)
    os.makedirs(destination)
    if source.git is not None:
        _git_archive(source, destination, field)
        return destination
    for entry in _Walk(source, field).entries():
        target = os.path.join(destination, entry.relative)
        if entry.kind == _FOLDER:
            os.makedirs(target, exist_ok=True)
        elif entry.kind == _FILE:
            copy_sparse(entry.path, target)
        elif entry.kind == _LINK:
            if os.path.lexists(target):  # named twice in include_paths
                os.unlink(target)
            os.symlink(entry.target, target)
    return destination


def survey(source: CodeSource, large: int = LARGE_SNAPSHOT_BYTES) -> List[str]:
    """Check, before the run is recorded, what :func:`take` will copy; return the notes for the user.

    Raises:
        WorkloadFileError: the copy would fail (a git pin naming no commit, an include path missing from it, a file
            or folder that cannot be read), naming the field and the path.
    """
    field = source.field
    largest: List[Tuple[int, str]] = []
    total, special, outside = 0, [], []
    if source.git is not None:
        found = _git_entries(source, field)
    else:
        found = _Walk(source, field).entries(check=True)
    for entry in found:
        if entry.kind == _FILE:
            total += entry.size
            heapq.heappush(largest, (entry.size, entry.relative))
            if len(largest) > _NAMED:
                heapq.heappop(largest)
        elif entry.kind == _SPECIAL:
            special.append(f"{entry.relative} ({entry.target})")
        elif entry.kind == _OUTSIDE:
            outside.append(f"{entry.relative} -> {entry.target}")
    notes = []
    if special:
        notes.append(
            f"{field}: special files left out of the snapshot (only regular files, folders and links are "
            f"copied): {_some(special)}"
        )
    if outside:
        notes.append(
            f"{field}: symbolic links left out of the snapshot, since they lead out of root_path (their "
            f"targets would not be in it): {_some(outside)}"
        )
    if total > large:
        named = ", ".join(f"{path} ({_size(size)})" for size, path in sorted(largest, reverse=True))
        notes.append(
            f"{field}: the snapshot is {_size(total)}, copied into the run's folder for every run; the "
            f"largest files: {named}. Leave data out of it (.gitignore or include_paths) and read it from "
            "where it is"
        )
    return notes


def _some(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_NAMED])
    return shown + (f" and {len(items) - _NAMED} more" if len(items) > _NAMED else "")


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


# --- the working tree ------------------------------------------------------------------------------------------------


class _Walk:
    """What a working-tree snapshot holds, in an order a copy can follow (each folder before what it holds)."""

    def __init__(self, source: CodeSource, field: str) -> None:
        self.root = source.root_path
        self.include = source.include_paths
        self.field = field
        self.real_root = os.path.realpath(self.root)
        self.skip = {os.path.realpath(paths.air_home())}  # never copy the registry into itself
        self.check = False

    def entries(self, check: bool = False) -> Iterator[_Entry]:
        """Every entry; with ``check``, a :class:`WorkloadFileError` for a file or folder that cannot be read."""
        self.check = check
        rules, prefix = rules_above(self.root)
        if self.include is None:
            yield from self._folder(self.root, "", rules, prefix)
            return
        for index, entry in enumerate(self.include):
            relative = "" if entry == "." else entry.replace(os.sep, "/")
            source = os.path.join(self.root, entry)
            parts = relative.split("/")
            for depth in range(1, len(parts)):
                yield _Entry(_FOLDER, "/".join(parts[:depth]), os.path.join(self.root, *parts[:depth]))
            if os.path.islink(source) and not _contains(self.real_root, os.path.realpath(source)):
                yield _Entry(_OUTSIDE, relative, source, target=os.path.realpath(source))  # changed since validated
            elif os.path.isdir(source):  # a folder, or a link to one under root_path: what it holds
                if relative:
                    yield _Entry(_FOLDER, relative, source)
                yield from self._folder(source, relative, _rules_down_to(self.root, relative, rules, prefix), prefix)
            elif os.path.lexists(source):
                yield self._other(os.path.realpath(source), relative)  # a link named here is followed
            else:  # it was there when the file was validated
                raise WorkloadFileError(
                    path=f"{self.field}.include_paths[{index}]",
                    problem=f"{entry!r} does not exist under root_path ({self.root})",
                )

    def _folder(self, source: str, relative: str, rules: IgnoreRules, prefix: str) -> Iterator[_Entry]:
        """What ``source`` (``relative`` to the code root) holds, the ignore rules of ``source`` itself added."""
        here = rules.with_file(os.path.join(source, ".gitignore"), _join(prefix, relative))
        try:
            with os.scandir(source) as scan:
                found = sorted(scan, key=lambda e: e.name)
        except OSError as error:
            raise self._unreadable(relative or ".", error) from None
        for item in found:
            if item.name == ".git" or item.name.startswith("._"):
                continue
            is_dir = item.is_dir(follow_symlinks=False)
            inside = _join(relative, item.name)
            if here.ignored(_join(prefix, inside), is_dir):
                continue
            if is_dir:
                if os.path.realpath(item.path) in self.skip:
                    continue
                yield _Entry(_FOLDER, inside, item.path)
                yield from self._folder(item.path, inside, here, prefix)
            else:
                yield self._other(item.path, inside)

    def _other(self, path: str, relative: str) -> _Entry:
        """A file, a link or a special file."""
        try:
            info = os.lstat(path)
        except OSError as error:
            raise self._unreadable(relative, error) from None
        if stat.S_ISLNK(info.st_mode):
            real = os.path.realpath(path)
            if not _contains(self.real_root, real):
                return _Entry(_OUTSIDE, relative, path, target=real)
            return _Entry(_LINK, relative, path, target=os.path.relpath(real, os.path.realpath(os.path.dirname(path))))
        if stat.S_ISREG(info.st_mode):
            if self.check and not os.access(path, os.R_OK):
                raise self._unreadable(relative, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
            return _Entry(_FILE, relative, path, size=info.st_size)
        return _Entry(_SPECIAL, relative, path, target=special_kind(info.st_mode))

    def _unreadable(self, relative: str, error: OSError) -> WorkloadFileError:
        return WorkloadFileError(
            path=self.field,
            problem=f"{relative} under root_path cannot be read "
            f"({error.strerror or error}): make it readable, or leave it out (.gitignore or "
            "include_paths)",
        )


def special_kind(mode: int) -> str:
    """What a file that is neither a regular file, a folder nor a link is, in words (``a FIFO (named pipe)``)."""
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _contains(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _rules_down_to(root: str, relative: str, rules: IgnoreRules, prefix: str) -> IgnoreRules:
    """The rules in force inside ``root/relative``: the .gitignore files of root and of each folder on the way."""
    folder, base = root, prefix
    rules = rules.with_file(os.path.join(folder, ".gitignore"), base)
    for part in relative.split("/")[:-1] if relative else []:
        folder, base = os.path.join(folder, part), _join(base, part)
        rules = rules.with_file(os.path.join(folder, ".gitignore"), base)
    return rules


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part)


def copy_sparse(source: str, target: str) -> None:
    """Copy a regular file's content, mode and times; its holes stay holes (only its data is read and written).

    A file that is no longer a regular file (replaced since the walk) is not copied.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    reading = os.open(source, flags)
    try:
        info = os.fstat(reading)
        if not stat.S_ISREG(info.st_mode):
            return
        writing = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            for start, end in _data_extents(reading, info.st_size):
                _copy_range(reading, writing, start, end)
            os.ftruncate(writing, info.st_size)  # a hole at the end
        finally:
            os.close(writing)
    finally:
        os.close(reading)
    shutil.copystat(source, target, follow_symlinks=False)


def _data_extents(descriptor: int, size: int) -> Iterator[Tuple[int, int]]:
    """The ``(start, end)`` ranges of a file that hold data; the whole file where holes cannot be found."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        yield 0, size
        return
    offset = 0
    while offset < size:
        try:
            start = os.lseek(descriptor, offset, seek_data)
        except OSError as error:
            if error.errno == errno.ENXIO:  # nothing but a hole from offset to the end
                return
            yield offset, size  # a file system that cannot tell
            return
        if start >= size:
            return
        try:
            end = min(os.lseek(descriptor, start, seek_hole), size)
        except OSError:
            end = size
        yield start, end
        offset = end


def _copy_range(reading: int, writing: int, start: int, end: int) -> None:
    offset = start
    in_kernel = hasattr(os, "copy_file_range")
    while offset < end:
        count = min(end - offset, 1 << 27)
        if in_kernel:
            try:
                copied = os.copy_file_range(reading, writing, count, offset, offset)
            except OSError:  # another file system, an old kernel: read and write
                in_kernel = False
                continue
        else:
            data = os.pread(reading, min(count, 1 << 20), offset)
            copied = os.pwrite(writing, data, offset) if data else 0
        if not copied:  # the file got shorter
            return
        offset += copied


# --- a git commit ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Pin:
    top: str
    """The repository's top folder."""
    tree: str
    """``<commit>:<root_path's path in the repository>``, or the commit when root_path is the top."""
    revision: str


def _resolve_pin(source: CodeSource, field: str) -> _Pin:
    """The commit a ``git`` section names, and root_path's tree in it (a :class:`WorkloadFileError` naming the field
    when root_path is in no repository or the revision is no commit)."""
    pin = source.git
    assert pin is not None
    revision = pin.commit or pin.branch or ""
    where = f"{field}.git.{'commit' if pin.commit else 'branch'}"
    root = source.root_path
    prefix = _git(
        root,
        ["rev-parse", "--show-prefix"],
        f"{field}.git",
        f"{root} is not inside a git repository: remove git: to snapshot the working tree, or point "
        "root_path into a repository",
        detail=False,
    ).strip()
    commit = _git(
        root,
        ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        where,
        f"{revision!r} is not a commit or branch of the repository at {root}",
    ).strip()
    top = _git(root, ["rev-parse", "--show-toplevel"], where, "cannot find the repository's top").strip()
    return _Pin(top, f"{commit}:{prefix.rstrip('/')}" if prefix else commit, revision)


def _git_entries(source: CodeSource, field: str) -> Iterator[_Entry]:
    """What ``git archive`` of the pin will hold: files with their sizes, and links that lead out of root_path."""
    pin = _resolve_pin(source, field)
    for index, entry in enumerate(source.include_paths or ()):
        path = entry.replace(os.sep, "/")
        if path == ".":
            continue
        found = subprocess.run(
            ["git", "-C", pin.top, "cat-file", "-e", f"{pin.tree}/{path}" if ":" in pin.tree else f"{pin.tree}:{path}"],
            capture_output=True,
            timeout=60,
        )
        if found.returncode != 0:
            raise WorkloadFileError(
                path=f"{field}.include_paths[{index}]",
                problem=f"{entry!r} is not in {pin.revision} under root_path ({source.root_path})",
            )
    listing = _git(
        pin.top,
        ["ls-tree", "-r", "-l", "-z", pin.tree, "--", *(source.include_paths or ())],
        f"{field}.git",
        f"cannot list the files of {pin.revision}",
        binary=True,
    )
    links = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, obj, size = meta.split()[:4]
        relative = name.decode(errors="replace")
        if mode == b"120000":
            links.append((relative, obj.decode()))
        elif kind == b"blob":
            yield _Entry(_FILE, relative, relative, size=int(size))
    if links:
        targets = _git(
            pin.top,
            ["cat-file", "--batch"],
            f"{field}.git",
            "cannot read the links of the commit",
            binary=True,
            stdin=b"".join(obj.encode() + b"\n" for _, obj in links),
        )
        stream = io.BytesIO(targets)
        for relative, _ in links:
            length = int(stream.readline().split()[2])
            target = stream.read(length).decode(errors="replace")
            stream.read(1)
            landing = os.path.normpath(os.path.join(os.path.dirname(relative), target))
            if os.path.isabs(target) or landing == os.pardir or landing.startswith(os.pardir + os.sep):
                yield _Entry(_OUTSIDE, relative, relative, target=target)


def _git_archive(source: CodeSource, destination: str, field: str) -> None:
    pin = _resolve_pin(source, field)
    arguments = ["archive", "--format=tar", pin.tree]
    if source.include_paths:
        arguments += ["--", *source.include_paths]
    where = f"{field}.include_paths" if source.include_paths else f"{field}.git"
    data = _git(pin.top, arguments, where, f"git archive of {pin.revision} failed", binary=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        if hasattr(tarfile, "data_filter"):
            archive.extractall(destination, filter=_inside_only)
        else:  # pragma: no cover - Python before 3.10.12 / 3.11.4
            archive.extractall(destination)


def _inside_only(member: tarfile.TarInfo, destination: str) -> Optional[tarfile.TarInfo]:
    """tarfile's ``data`` filter, a member it refuses (a link leading out of the snapshot) left out, as
    :func:`survey` said, rather than failing the run."""
    try:
        return tarfile.data_filter(member, destination)
    except tarfile.FilterError:
        return None


def _git(
    folder: str,
    arguments: Sequence[str],
    path: str,
    failure: str,
    binary: bool = False,
    stdin: Optional[bytes] = None,
    detail: bool = True,
):
    try:
        done = subprocess.run(["git", "-C", folder, *arguments], capture_output=True, timeout=300, input=stdin)
    except FileNotFoundError:
        raise WorkloadFileError(path=path, problem="needs git, which is not installed") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines() if detail else []
        raise WorkloadFileError(path=path, problem=failure + (f" ({said[-1]})" if said else ""))
    return done.stdout if binary else done.stdout.decode()
