"""Listing a folder: order, recursion, filters, hidden names, and the errors for a path that cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from databricks.air.data import UCVolumeDataset
from databricks.air.data.errors import DataPathNotADirectoryError, DataPathNotFoundError, EmptyDatasetError
from databricks.air.data.filesystem import VolumeFileSystem


def _tree(root: Path) -> None:
    for relative in [
        "b.txt",
        "a.txt",
        "sub/c.jpg",
        "sub/deeper/d.jpg",
        "sub/e.txt",
        ".hidden",
        "_SUCCESS",
        "part.tmp",
        "notes~",
        "_logs/x.txt",
        ".git/config",
        "z.jpg",
    ]:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(relative)


def _names(dataset: UCVolumeDataset) -> list:
    return list(dataset.listing.files)


def test_top_level_only_by_default_sorted_hidden_skipped(tmp_path: Path) -> None:
    _tree(tmp_path)
    dataset = UCVolumeDataset(tmp_path, cache=False)
    assert _names(dataset) == ["a.txt", "b.txt", "z.jpg"]
    assert list(dataset) == [str(tmp_path / n) for n in ["a.txt", "b.txt", "z.jpg"]]


def test_recursive_listing_sorts_by_relative_path_and_skips_hidden_folders(tmp_path: Path) -> None:
    _tree(tmp_path)
    dataset = UCVolumeDataset(tmp_path, recursive=True, cache=False)
    assert _names(dataset) == ["a.txt", "b.txt", "sub/c.jpg", "sub/deeper/d.jpg", "sub/e.txt", "z.jpg"]


def test_include_and_exclude_globs_match_relative_paths(tmp_path: Path) -> None:
    _tree(tmp_path)
    jpgs = UCVolumeDataset(tmp_path, recursive=True, include="*.jpg", cache=False)
    assert _names(jpgs) == ["sub/c.jpg", "sub/deeper/d.jpg", "z.jpg"]
    no_deeper = UCVolumeDataset(tmp_path, recursive=True, include=["*.jpg", "*.txt"], exclude="sub/deeper/*")
    assert _names(no_deeper) == ["a.txt", "b.txt", "sub/c.jpg", "sub/e.txt", "z.jpg"]


def test_hidden_true_lists_dot_underscore_and_temporary_names(tmp_path: Path) -> None:
    _tree(tmp_path)
    dataset = UCVolumeDataset(tmp_path, recursive=True, hidden=True, cache=False)
    assert {".hidden", "_SUCCESS", "part.tmp", "notes~", "_logs/x.txt", ".git/config"} <= set(_names(dataset))


def test_symlinked_files_are_listed_but_symlinked_folders_never_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "real.bin").write_bytes(b"x")
    (data / "own.bin").write_bytes(b"y")
    os.symlink(tmp_path / "real.bin", data / "link.bin")
    os.symlink(data, data / "loop")  # would recurse forever if followed
    os.symlink(tmp_path / "missing", data / "broken.bin")
    assert _names(UCVolumeDataset(data, recursive=True, cache=False)) == ["link.bin", "own.bin"]


def test_a_missing_path_fails_at_once_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"

    class CountingStats(VolumeFileSystem):
        calls = 0

        def stat(self, path: str) -> os.stat_result:
            CountingStats.calls += 1
            return super().stat(path)

    with pytest.raises(FileNotFoundError, match="no/such does not exist") as caught:
        UCVolumeDataset(missing, filesystem=CountingStats())
    assert CountingStats.calls == 1  # a definite ENOENT is never retried
    assert isinstance(caught.value, ValueError)  # what the reference raises
    assert isinstance(caught.value, DataPathNotFoundError) and caught.value.filename == str(missing)


def test_a_file_instead_of_a_folder_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "one.bin").write_bytes(b"1")
    with pytest.raises(NotADirectoryError, match=r"is a file, not a folder.*include=\['one.bin'\]") as caught:
        UCVolumeDataset(tmp_path / "one.bin")
    assert isinstance(caught.value, (ValueError, DataPathNotADirectoryError))
    assert list(UCVolumeDataset(tmp_path, include=["one.bin"], cache=False)) == [str(tmp_path / "one.bin")]


def test_an_empty_folder_is_an_error_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(EmptyDatasetError, match="no files to read.*allow_empty=True"):
        UCVolumeDataset(tmp_path)
    (tmp_path / ".only_hidden").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.bin").write_text("x")
    with pytest.raises(ValueError, match=r"1 hidden name\(s\) skipped.*recursive=True reads them"):
        UCVolumeDataset(tmp_path)
    empty = UCVolumeDataset(tmp_path, allow_empty=True)
    assert len(empty) == 0 and list(empty) == []


def test_filters_that_leave_nothing_say_so(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(EmptyDatasetError, match=r"1 file\(s\) left out by include/exclude"):
        UCVolumeDataset(tmp_path, include="*.jpg")


def test_any_local_path_works_and_none_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"x")
    assert len(UCVolumeDataset(str(tmp_path))) == 1  # no /Volumes prefix needed
    with pytest.raises(TypeError, match="needs a folder path"):
        UCVolumeDataset(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a folder path"):
        UCVolumeDataset("")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"equalize": "even"}, "equalize must be one of"),
        ({"cache": "yes"}, "cache must be 'auto', True or False"),
        ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip'"),
        ({"rank": 0}, "pass both rank= and world_size="),
        ({"rank": 2, "world_size": 2}, "rank=2 must be smaller than world_size=2"),
        ({"io_threads": 0}, "io_threads must be an int >= 1"),
        ({"cache_limit_bytes": 0}, "cache_limit_bytes must be an int >= 1"),
        ({"retries": 0}, "retries must be an int >= 1"),
        ({"include": [3]}, "include must be a glob string"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict, message: str) -> None:
    (tmp_path / "x.bin").write_bytes(b"x")
    with pytest.raises((ValueError, TypeError), match=message):
        UCVolumeDataset(tmp_path, **kwargs)
