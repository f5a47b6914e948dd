"""Reading errors: bounded retries, no retry for definite answers, vanishing files, and on_error='skip'."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Callable

import pytest

from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.errors import DataFileError, DataFilePermissionError, DataFileVanishedError

from .conftest import FlakyFileSystem, RemoteFileSystem


def _eio() -> OSError:
    return OSError(errno.EIO, "Input/output error")


def test_f5_a_transient_error_is_retried_and_the_epoch_completes(files: Callable[..., Path]) -> None:
    folder = files(4)
    flaky = FlakyFileSystem({"f0002.bin": 2}, _eio())
    dataset = UCVolumeDataset(folder, filesystem=flaky, retry_seconds=5.0)
    assert len(list(dataset)) == 4
    assert flaky.attempts["f0002.bin"] == 3


def test_f5_a_persistent_error_gives_up_after_the_attempts_naming_the_file(files: Callable[..., Path]) -> None:
    folder = files(3)
    flaky = FlakyFileSystem({"f0001.bin": 100}, _eio())
    dataset = UCVolumeDataset(folder, filesystem=flaky, retries=3, retry_seconds=5.0)
    with pytest.raises(DataFileError, match=r"cannot copy .*f0001.bin after 3 attempts") as caught:
        list(dataset)
    assert flaky.attempts["f0001.bin"] == 3
    assert caught.value.path.endswith("f0001.bin") and isinstance(caught.value, RuntimeError)


def test_f5_the_total_retry_time_is_bounded(files: Callable[..., Path]) -> None:
    folder = files(2)
    flaky = FlakyFileSystem({"f0000.bin": 100}, _eio())
    with pytest.raises(DataFileError):
        list(UCVolumeDataset(folder, filesystem=flaky, retries=50, retry_seconds=0.5))
    assert flaky.attempts["f0000.bin"] <= 4  # 0.1 + 0.2 + 0.4 s of waiting fit in 0.5 s, not 50 attempts


def test_f5_permission_errors_are_never_retried(files: Callable[..., Path]) -> None:
    folder = files(2)
    flaky = FlakyFileSystem({"f0000.bin": 100}, PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError, match="Check that this user may read the file") as caught:
        list(UCVolumeDataset(folder, filesystem=flaky))
    assert flaky.attempts["f0000.bin"] == 1
    assert isinstance(caught.value, DataFilePermissionError)


def test_f6_a_file_deleted_during_the_epoch_is_named(files: Callable[..., Path]) -> None:
    folder = files(5)
    dataset = UCVolumeDataset(folder, filesystem=RemoteFileSystem(), io_threads=1)  # no read-ahead
    iterator = iter(dataset)
    next(iterator)
    os.unlink(folder / "f0003.bin")
    with pytest.raises(FileNotFoundError, match=r"f0003.bin was listed when the dataset was built but is gone") as c:
        list(iterator)
    assert isinstance(c.value, DataFileVanishedError) and c.value.filename.endswith("f0003.bin")


def test_on_error_skip_keeps_every_rank_count_and_records_the_file(
    files: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    folder = files(12)
    counts = []
    for rank in range(2):
        flaky = FlakyFileSystem({"f0004.bin": 100, "f0000.bin": 100}, _eio())
        dataset = UCVolumeDataset(folder, rank=rank, world_size=2, filesystem=flaky, on_error="skip", retries=1)
        loader = DataLoader(dataset, batch_size=2, num_workers=2)
        with caplog.at_level(logging.WARNING, logger="databricks.air.data"):
            got = [p for batch in loader for p in batch]
        counts.append(len(got))
        names = [os.path.basename(p) for p in got]
        if rank == 0:
            assert "f0004.bin" not in names and "f0000.bin" not in names
            assert loader.state_dict()["skipped"] == []  # a new epoch
    assert counts == [6, 6]
    assert "could not read f0004.bin" in caplog.text and "f0000.bin" in caplog.text


def test_on_error_skip_records_skipped_files_in_the_state_mid_epoch(files: Callable[..., Path]) -> None:
    folder = files(8)
    flaky = FlakyFileSystem({"f0001.bin": 100}, _eio())
    loader = DataLoader(
        UCVolumeDataset(folder, filesystem=flaky, on_error="skip", retries=1), batch_size=2, num_workers=0
    )
    iterator = iter(loader)
    first = next(iterator)
    assert os.path.basename(first[1]) == "f0000.bin"  # the slot is filled with another file
    assert loader.state_dict()["skipped"] == ["f0001.bin"]


def test_on_error_skip_with_nothing_readable_still_fails(files: Callable[..., Path]) -> None:
    folder = files(2)
    flaky = FlakyFileSystem({"f0000.bin": 100, "f0001.bin": 100}, _eio())
    with pytest.raises(DataFileError, match="none of this worker's 2 remaining files could be read"):
        list(UCVolumeDataset(folder, filesystem=flaky, on_error="skip", retries=1))


def test_without_a_process_group_a_multi_rank_environment_is_refused(
    files: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    dataset = UCVolumeDataset(files(3))
    with pytest.raises(RuntimeError, match="WORLD_SIZE=2 but torch.distributed has no process group"):
        len(dataset)
