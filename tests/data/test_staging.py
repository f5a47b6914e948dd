"""Staged copies: invisible until complete, linked or swapped into place, nothing left behind, in both modes."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterator, List

import pytest

from databricks.air.data import staging
from databricks.air.data.filesystem import VolumeFileSystem

from .conftest import file_cache, volume_of

UNNAMED_SUPPORTED = staging._O_TMPFILE is not None and os.path.isdir("/proc/self/fd")


@pytest.fixture(params=["unnamed", "named"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "unnamed":
        if not UNNAMED_SUPPORTED:
            pytest.skip("no O_TMPFILE here")
        monkeypatch.setattr(staging, "_unnamed_available", None)  # probed again, as in a fresh process
    else:
        monkeypatch.setattr(staging, "_unnamed_available", False)  # as on a file system without O_TMPFILE
    yield request.param


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as stream:  # what VolumeFileSystem.copy and users' copies do
        stream.write(data)


def test_a_staged_file_has_no_visible_name_until_linked(tmp_path: Path, mode: str) -> None:
    destination = tmp_path / "a.bin"
    staged = staging.StagedFile(str(destination))
    _write(staged.path, b"payload")
    staged.set_times(1_000_000_000, 2_000_000_000)
    during = os.listdir(tmp_path)
    if mode == "unnamed":
        assert during == [] and staged.path.startswith("/proc/self/fd/")
    else:
        assert len(during) == 1 and staging.is_temporary(during[0])
    assert staged.link()
    assert os.listdir(tmp_path) == ["a.bin"]
    assert destination.read_bytes() == b"payload"
    assert os.stat(destination).st_mtime_ns == 2_000_000_000


def test_link_refuses_a_taken_name_and_replace_swaps_it(tmp_path: Path, mode: str) -> None:
    destination = tmp_path / "a.bin"
    destination.write_bytes(b"old")
    staged = staging.StagedFile(str(destination))
    _write(staged.path, b"new")
    assert not staged.link()
    assert destination.read_bytes() == b"old"  # untouched
    staged.replace()
    assert destination.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_a_discarded_file_leaves_nothing(tmp_path: Path, mode: str) -> None:
    staged = staging.StagedFile(str(tmp_path / "a.bin"))
    _write(staged.path, b"half")
    staged.discard()
    assert os.listdir(tmp_path) == []


def test_when_an_unnamed_file_cannot_be_named_copies_go_through_a_hidden_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not UNNAMED_SUPPORTED:
        pytest.skip("no O_TMPFILE here")
    monkeypatch.setattr(staging, "_unnamed_available", None)
    monkeypatch.setattr(staging, "_can_link", lambda fd, folder: False)  # as in a sandbox that refuses linkat
    staged = staging.StagedFile(str(tmp_path / "a.bin"))
    assert staging.is_temporary(os.path.basename(staged.path))
    assert staging._unnamed_available is False
    staged.discard()


def test_the_probe_names_a_throwaway_file_and_removes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not UNNAMED_SUPPORTED:
        pytest.skip("no O_TMPFILE here")
    monkeypatch.setattr(staging, "_unnamed_available", None)
    staged = staging.StagedFile(str(tmp_path / "a.bin"))
    assert staging._unnamed_available is True
    assert os.listdir(tmp_path) == []  # the probe's name is gone
    _write(staged.path, b"x")
    assert staged.link()  # the file handed out is a fresh one, not the probe (a named file cannot be linked again)
    assert (tmp_path / "a.bin").read_bytes() == b"x"


def test_every_copy_of_a_cache_fill_goes_through_a_staged_file(tmp_path: Path, mode: str) -> None:
    root = volume_of(tmp_path, {"a.bin": b"data"})
    seen: List[List[str]] = []

    class Looking(VolumeFileSystem):
        def copy(self, source: str, destination: str) -> None:
            super().copy(source, destination)
            seen.append(sorted(os.listdir(cache.files_dir)))

    cache = file_cache(tmp_path, Looking(), limit_bytes=1024)
    copy = cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    assert Path(copy).read_bytes() == b"data"
    assert seen[0] == ([] if mode == "unnamed" else [f".a.bin.{os.getpid()}.{staging.threading.get_ident()}.part"])
    assert os.listdir(cache.files_dir) == ["a.bin"] and cache.usage_bytes() == 4


def test_a_cache_that_cannot_create_its_copy_says_so_and_gives_its_bytes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = volume_of(tmp_path, {"a.bin": b"data"})
    cache = file_cache(tmp_path, limit_bytes=1024)

    def full(destination: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", os.path.dirname(destination))

    monkeypatch.setattr("databricks.air.data.cache.StagedFile", full)
    with pytest.raises(OSError, match=r"cannot write the cached copy of .*a\.bin.*cache_limit_bytes=") as caught:
        cache.fetch(str(root / "a.bin"), "a.bin", lambda: set())
    assert caught.value.errno == errno.ENOSPC
    assert cache.usage_bytes() == 0


@pytest.mark.parametrize("finish", ["link", "replace"])
def test_an_unnamed_file_that_cannot_be_named_is_copied_to_a_hidden_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finish: str
) -> None:
    if not UNNAMED_SUPPORTED:
        pytest.skip("no O_TMPFILE here")
    monkeypatch.setattr(staging, "_unnamed_available", True)
    destination = tmp_path / "a.bin"
    if finish == "replace":
        destination.write_bytes(b"old")
    staged = staging.StagedFile(str(destination))
    assert staged.path.startswith("/proc/self/fd/")
    payload = os.urandom(3 * 1024 * 1024 + 5)
    _write(staged.path, payload)
    staged.set_times(1_000_000_000, 2_000_000_000)

    def refused(fd: int, name: str) -> None:  # as where linkat through /proc is not allowed
        raise PermissionError(errno.EPERM, "Operation not permitted", name)

    monkeypatch.setattr(staging, "_link_unnamed", refused)
    if finish == "link":
        assert staged.link()
    else:
        staged.replace()
    assert destination.read_bytes() == payload
    assert os.stat(destination).st_mtime_ns == 2_000_000_000
    assert os.listdir(tmp_path) == ["a.bin"]
    assert staging._unnamed_available is False  # the next copies go through hidden files from the start
