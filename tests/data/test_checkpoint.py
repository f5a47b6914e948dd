"""UCVolumeWriter / UCVolumeReader: round trips, a commit that survives crashes, checksums, clean folders."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException

from databricks.air.data import UCVolumeReader, UCVolumeWriter
from databricks.air.data.errors import CorruptCheckpointError


@pytest.fixture(autouse=True)
def _single_process_dcp() -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        warnings.filterwarnings("ignore", message=".*Detected an existing checkpoint.*")
        yield


def _state() -> Dict[str, Any]:
    torch.manual_seed(0)
    return {
        "f32": torch.randn(64, 33),
        "f16": torch.randn(10).half(),
        "bf16": torch.randn(10).bfloat16(),
        "i8": torch.randint(-100, 100, (7,), dtype=torch.int8),
        "u8": torch.randint(0, 255, (7,), dtype=torch.uint8),
        "i64": torch.arange(5),
        "b": torch.tensor([True, False, True]),
        "c64": torch.randn(4, dtype=torch.complex64),
        "view": torch.arange(40.0).reshape(5, 8).t(),  # not contiguous
        "nested": {"deeper": {"t": torch.ones(3, 3)}, "step": 7},
        "name": "run-1",
        "big": torch.randn(3 * 1024 * 1024),  # 12 MiB: several checksum blocks
    }


def _empty_like(state: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            out[key] = torch.zeros_like(value)
        elif isinstance(value, dict):
            out[key] = _empty_like(value)
        else:
            out[key] = type(value)()
    return out


def _assert_equal(a: Dict[str, Any], b: Dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        elif isinstance(a[key], dict):
            _assert_equal(a[key], b[key])
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("threads", [1, 3])
def test_i1_round_trip_is_bit_identical_and_torch_reads_it_too(tmp_path: Path, threads: int) -> None:
    state = _state()
    dcp.save(state, storage_writer=UCVolumeWriter(tmp_path, thread_count=threads))
    assert (tmp_path / ".metadata").exists() and (tmp_path / ".checksums.json").exists()
    loaded = _empty_like(state)
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    _assert_equal(loaded, state)
    stock = _empty_like(state)
    dcp.load(stock, storage_reader=FileSystemReader(tmp_path))  # the format stays torch's
    _assert_equal(stock, state)


def test_a_checkpoint_written_by_torch_loads_without_checksums(tmp_path: Path) -> None:
    state = _state()
    dcp.save(state, storage_writer=FileSystemWriter(tmp_path))
    loaded = _empty_like(state)
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    _assert_equal(loaded, state)


def test_checksums_are_computed_by_isal_where_it_is_installed() -> None:
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    from databricks.air.data import crc

    assert crc.crc32 is isal_zlib.crc32  # zlib's numbers (checked below), 5 times faster


def test_combining_two_crcs_gives_the_crc_of_the_joined_bytes() -> None:
    import random
    import zlib

    from databricks.air.data.crc import combine

    chooser = random.Random(7)
    for _ in range(200):
        first = os.urandom(chooser.choice([0, 1, chooser.randrange(2, 70_000)]))
        second = os.urandom(chooser.choice([0, 1, 3, chooser.randrange(4, 70_000), 4 * 1024 * 1024 - 1]))
        assert combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(first + second)


def test_block_checksums_do_not_depend_on_how_the_bytes_are_cut_or_hashed() -> None:
    import zlib
    from concurrent.futures import ThreadPoolExecutor

    from databricks.air.data.checksums import BLOCK_SIZE, BlockChecksums

    data = memoryview(os.urandom(2 * BLOCK_SIZE + 12345))
    expected = [zlib.crc32(data[i : i + BLOCK_SIZE]) for i in range(0, len(data), BLOCK_SIZE)]
    with ThreadPoolExecutor(3) as pool:
        for cuts in ([0, len(data)], [0, 100, BLOCK_SIZE + 7, len(data) - 1, len(data)], [0, BLOCK_SIZE, len(data)]):
            sums = BlockChecksums()
            for start, end in zip(cuts, cuts[1:]):
                sums.finish_update(sums.start_update(data[start:end], pool))
            assert sums.record() == {"size": len(data), "block_size": BLOCK_SIZE, "crc32": expected}


def _flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as stream:
        stream.seek(offset)
        byte = stream.read(1)
        stream.seek(offset)
        stream.write(bytes([byte[0] ^ 0x10]))


def _failure(error: BaseException) -> BaseException:
    """The rank's own exception inside DCP's CheckpointException."""
    assert isinstance(error, CheckpointException)
    (failure,) = [f[0] if isinstance(f, tuple) else f for f in error.failures.values()]
    return failure


@pytest.mark.parametrize("where", [0.0, 0.5, 0.999])
def test_i4_one_flipped_byte_fails_the_load_naming_the_file(tmp_path: Path, where: float) -> None:
    state = _state()
    dcp.save(state, storage_writer=UCVolumeWriter(tmp_path))
    data = tmp_path / "__0_0.distcp"
    _flip_byte(data, int(data.stat().st_size * where))
    loaded = _empty_like(state)
    with pytest.raises(CheckpointException) as caught:
        dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    failure = _failure(caught.value)
    assert isinstance(failure, CorruptCheckpointError) and str(data) in str(failure)
    assert "do not match the checksum" in str(failure)


def test_i4_torch_own_reader_loads_the_same_damage_silently(tmp_path: Path) -> None:
    state = {"big": torch.randn(3 * 1024 * 1024)}
    dcp.save(state, storage_writer=UCVolumeWriter(tmp_path))
    data = tmp_path / "__0_0.distcp"
    _flip_byte(data, data.stat().st_size // 2)
    loaded = {"big": torch.zeros(3 * 1024 * 1024)}
    dcp.load(loaded, storage_reader=FileSystemReader(tmp_path))  # no error...
    assert not torch.equal(loaded["big"], state["big"])  # ...and wrong values: what the checksums catch


def test_i4_a_truncated_file_is_named(tmp_path: Path) -> None:
    dcp.save(_state(), storage_writer=UCVolumeWriter(tmp_path))
    data = tmp_path / "__0_0.distcp"
    os.truncate(data, data.stat().st_size - 100)
    with pytest.raises(CheckpointException) as caught:
        dcp.load(_empty_like(_state()), storage_reader=UCVolumeReader(tmp_path))
    assert "bytes but" in str(_failure(caught.value)) and str(data) in str(_failure(caught.value))


class _CrashAfterData(UCVolumeWriter):
    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        super().write_data(plan, planner).wait()
        raise RuntimeError("power cut after the data files")


class _CrashBeforeCommit(UCVolumeWriter):
    def finish(self, metadata, results):  # type: ignore[no-untyped-def]
        raise RuntimeError("power cut before .metadata")


class _CrashAfterFirstFile(UCVolumeWriter):
    def _record_file(self, name, record):  # type: ignore[no-untyped-def]
        super()._record_file(name, record)
        raise RuntimeError("power cut after one data file")


@pytest.mark.parametrize("writer", [_CrashAfterFirstFile, _CrashAfterData, _CrashBeforeCommit])
def test_i3_a_save_that_dies_never_loads_not_even_over_an_older_checkpoint(tmp_path: Path, writer: type) -> None:
    older = {"w": torch.ones(1000), "step": 1}
    dcp.save(older, storage_writer=UCVolumeWriter(tmp_path))
    newer = {"w": torch.full((1000,), 2.0), "step": 2}
    with pytest.raises(CheckpointException):
        dcp.save(newer, storage_writer=writer(tmp_path, thread_count=1 if writer is _CrashAfterFirstFile else 2))
    with pytest.raises(CheckpointException) as caught:
        dcp.load({"w": torch.zeros(1000), "step": 0}, storage_reader=UCVolumeReader(tmp_path))
    assert f"incomplete checkpoint at {tmp_path}: .metadata missing" in str(caught.value)
    dcp.save(newer, storage_writer=UCVolumeWriter(tmp_path))  # the next save completes it
    loaded = {"w": torch.zeros(1000), "step": 0}
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    assert torch.equal(loaded["w"], newer["w"]) and loaded["step"] == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_writer_thread_that_dies_fails_the_save_instead_of_dropping_its_items(tmp_path: Path) -> None:
    import threading

    class DiesInAThread(UCVolumeWriter):
        def _record_file(self, name, record):  # type: ignore[no-untyped-def]
            super()._record_file(name, record)
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("disk gone under a writer thread")

    state = {f"t{i}": torch.full((1000,), float(i)) for i in range(6)}
    with pytest.raises(CheckpointException) as caught:
        dcp.save(state, storage_writer=DiesInAThread(tmp_path, thread_count=3))
    assert "item(s) were not written" in str(caught.value)
    assert not (tmp_path / ".metadata").exists()


def test_i3_a_manifest_from_another_save_is_refused(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    dcp.save({"w": torch.ones(10)}, storage_writer=UCVolumeWriter(first))
    dcp.save({"w": torch.ones(10)}, storage_writer=UCVolumeWriter(second))
    os.replace(second / ".checksums.json", first / ".checksums.json")
    with pytest.raises(CheckpointException) as caught:
        dcp.load({"w": torch.zeros(10)}, storage_reader=UCVolumeReader(first))
    assert "belongs to another save" in str(caught.value)


def test_i5_missing_and_empty_folders_and_refused_overwrites_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(CheckpointException) as missing:
        dcp.load({"w": torch.zeros(1)}, storage_reader=UCVolumeReader(tmp_path / "nowhere"))
    assert "no checkpoint at" in str(missing.value) and "does not exist" in str(missing.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointException) as empty:
        dcp.load({"w": torch.zeros(1)}, storage_reader=UCVolumeReader(tmp_path / "empty"))
    assert ".metadata missing" in str(empty.value)
    dcp.save({"w": torch.ones(1)}, storage_writer=UCVolumeWriter(tmp_path / "ckpt"))
    with pytest.raises(CheckpointException) as refused:
        dcp.save({"w": torch.ones(1)}, storage_writer=UCVolumeWriter(tmp_path / "ckpt", overwrite=False))
    assert "already exists" in str(refused.value)
    (tmp_path / "ckpt" / ".metadata").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CheckpointException) as damaged:
        dcp.load({"w": torch.zeros(1)}, storage_reader=UCVolumeReader(tmp_path / "ckpt"))
    assert "is unreadable (truncated or damaged)" in str(damaged.value)


def test_i6_data_files_of_a_larger_earlier_save_are_removed(tmp_path: Path) -> None:
    for rank in (1, 2, 3):  # what a 4-rank save left behind
        (tmp_path / f"__{rank}_0.distcp").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("mine")
    dcp.save({"w": torch.ones(4)}, storage_writer=UCVolumeWriter(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".checksums.json", ".metadata", "__0_0.distcp", "notes.txt"]


def test_i9_five_saves_through_one_writer_leave_no_scratch_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temporary folder of this test's own: the shared one also holds what other tests make meanwhile.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))
    before = set(os.listdir(scratch))
    writer = UCVolumeWriter(tmp_path / "ckpt")
    for step in range(5):
        dcp.save({"w": torch.full((100_000,), float(step)), "step": step}, storage_writer=writer)
        assert sorted(os.listdir(tmp_path / "ckpt")) == [".checksums.json", ".metadata", "__0_0.distcp"]
    assert set(os.listdir(scratch)) - before == set()
    loaded = {"w": torch.zeros(100_000), "step": 0}
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path / "ckpt"))
    assert loaded["step"] == 4 and torch.equal(loaded["w"], torch.full((100_000,), 4.0))


def test_i10_async_save_snapshots_the_state_and_reports_errors_through_the_future(tmp_path: Path) -> None:
    state = {"w": torch.arange(1000.0)}
    future = dcp.async_save(state, storage_writer=UCVolumeWriter(tmp_path / "ckpt"))
    state["w"].add_(1000)  # changed right after the call returned
    future.result()
    loaded = {"w": torch.zeros(1000)}
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path / "ckpt"))
    assert torch.equal(loaded["w"], torch.arange(1000.0))
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    failing = dcp.async_save({"w": torch.ones(1)}, storage_writer=UCVolumeWriter(blocked / "ckpt"))
    with pytest.raises(BaseException):
        failing.result()


def test_checkpoint_ids_any_local_path_and_volumes_but_no_urls(tmp_path: Path) -> None:
    for cls in (UCVolumeWriter, UCVolumeReader):
        assert cls.validate_checkpoint_id("/Volumes/main/default/ckpt/step_1")
        assert cls.validate_checkpoint_id(str(tmp_path / "ckpt"))
        assert not cls.validate_checkpoint_id("s3://bucket/ckpt")
    writer = UCVolumeWriter(tmp_path / "a")
    writer.reset(tmp_path / "b")
    dcp.save({"w": torch.ones(2)}, storage_writer=writer, checkpoint_id=tmp_path / "c")
    assert (tmp_path / "c" / ".metadata").exists() and not (tmp_path / "a").exists()


FORKED_CHILD = """
import os, sys, time, torch, warnings
import torch.distributed.checkpoint as dcp
from databricks.air.data import UCVolumeReader, UCVolumeWriter

warnings.simplefilter("ignore")
folder = sys.argv[1]
dcp.save({"w": torch.randn(2 * 1024 * 1024)}, storage_writer=UCVolumeWriter(folder + "/parent"))
child = os.fork()
if child == 0:  # the parent's checksum threads do not exist here
    status = 1
    try:
        state = {"w": torch.randn(2 * 1024 * 1024)}
        dcp.save(state, storage_writer=UCVolumeWriter(folder + "/child"))
        loaded = {"w": torch.zeros(2 * 1024 * 1024)}
        dcp.load(loaded, storage_reader=UCVolumeReader(folder + "/child"))
        status = 0 if torch.equal(loaded["w"], state["w"]) else 2
    finally:
        os._exit(status)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(child, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(child, 9)
print("the forked child hung")
sys.exit(3)
"""


@pytest.mark.slow
def test_a_forked_child_checksums_with_threads_of_its_own(tmp_path: Path) -> None:
    import subprocess
    import sys

    # In a fresh process: forking pytest itself, whose other threads may hold locks, would test something else.
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD, str(tmp_path)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]


def _items(path: Path) -> Dict[str, Any]:
    """Where each tensor's bytes lie in the checkpoint's data file: name -> (offset, length)."""
    metadata = FileSystemReader(path).read_metadata()
    return {index.fqn: (info.offset, info.length) for index, info in metadata.storage_data.items()}


def _many_tensors() -> Dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {f"t{i}": torch.randn(768 * 1024) for i in range(8)}  # 3 MiB each: blocks straddle the items


def test_a_load_reads_again_only_the_bytes_no_read_of_torch_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = _many_tensors()
    dcp.save(state, storage_writer=UCVolumeWriter(tmp_path))
    read_again = [0]
    real_pread = os.pread

    def counting(descriptor: int, length: int, offset: int) -> bytes:
        data = real_pread(descriptor, length, offset)
        read_again[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting)
    loaded = {key: torch.zeros_like(value) for key, value in state.items()}
    dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    _assert_equal(loaded, state)
    # Every block is checked; only zip headers and padding between the tensors are read a second time (reading
    # each block that two tensors share again would be 6 of the 24 MiB).
    assert read_again[0] < 64 * 1024, read_again[0]


@pytest.mark.parametrize(
    "where",
    [
        "before a block boundary",
        "after a block boundary",
        "end of an item",
        "start of the next item",
        "inside an item",
        "last byte",
    ],
)
def test_damage_anywhere_fails_the_load_and_no_damaged_tensor_is_committed(tmp_path: Path, where: str) -> None:
    from databricks.air.data.checksums import BLOCK_SIZE

    state = _many_tensors()
    dcp.save(state, storage_writer=UCVolumeWriter(tmp_path))
    data = tmp_path / "__0_0.distcp"
    items = _items(tmp_path)
    first_end = sum(items["t0"])
    offset = {
        "before a block boundary": BLOCK_SIZE - 1,
        "after a block boundary": BLOCK_SIZE,
        "end of an item": first_end - 3,  # the tensor file's trailer, which torch reads first
        "start of the next item": first_end + 3,  # the next tensor file's header
        "inside an item": items["t5"][0] + items["t5"][1] // 2,
        "last byte": data.stat().st_size - 1,
    }[where]
    _flip_byte(data, offset)
    loaded = {key: torch.zeros_like(value) for key, value in state.items()}
    with pytest.raises(CheckpointException) as caught:
        dcp.load(loaded, storage_reader=UCVolumeReader(tmp_path))
    failure = _failure(caught.value)
    assert isinstance(failure, CorruptCheckpointError) and str(data) in str(failure)
    for key, tensor in loaded.items():  # each tensor either arrived whole and right, or not at all
        assert torch.equal(tensor, state[key]) or not tensor.any(), key
    damaged = [key for key, (start, length) in items.items() if start <= offset < start + length]
    assert damaged and not loaded[damaged[0]].any()
