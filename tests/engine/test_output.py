"""Rank output: rank 0 live in the caller's streams, byte for byte; every rank in its log file."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from databricks.air import distributed

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def progress() -> None:
    rank = os.environ["RANK"]
    for step in range(3):
        sys.stdout.write(f"\rrank {rank} step {step} ✓")
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(f"warning from {rank} – é", file=sys.stderr)
    os.write(1, f"raw fd write {rank}\n".encode())


def test_rank_zero_output_reaches_the_callers_streams_byte_for_byte(capsys: pytest.CaptureFixture[str]) -> None:
    cpu2(progress).distributed()
    captured = capsys.readouterr()
    assert captured.out == "\rrank 0 step 0 ✓\rrank 0 step 1 ✓\rrank 0 step 2 ✓\nraw fd write 0\n"
    assert "warning from 0 – é\n" in captured.err
    assert "from 1" not in captured.out + captured.err


def test_every_rank_has_its_own_log_file() -> None:
    fn = cpu2(progress)
    fn.distributed()
    for rank in (0, 1):
        text = (Path(fn.last_log_dir) / f"rank_{rank}.txt").read_bytes().decode()
        assert f"\rrank {rank} step 2 ✓\n" in text
        assert f"warning from {rank} – é\n" in text
        assert f"raw fd write {rank}\n" in text


def test_show_all_ranks_prefixes_every_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_SHOW_ALL_RANKS", "1")

    def lines() -> None:
        print(f"first {os.environ['RANK']}\nsecond {os.environ['RANK']}")
        sys.stdout.write("no newline")

    cpu2(lines).distributed()
    out = capsys.readouterr().out.splitlines()
    for rank in (0, 1):
        assert f"[rank {rank}] first {rank}" in out
        assert f"[rank {rank}] second {rank}" in out
        assert f"[rank {rank}] no newline" in out


class _TimedStream(io.StringIO):
    """A stand-in for a notebook's output stream that notes when each write arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: List[Tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return super().write(text)


@pytest.mark.slow
def test_output_arrives_while_the_rank_is_still_running(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow() -> None:
        print("started", flush=True)
        time.sleep(2.0)
        print("finished")

    stream = _TimedStream()
    monkeypatch.setattr(sys, "stdout", stream)
    cpu2(slow).distributed()
    ended = time.monotonic()
    first_arrival = min(at for at, text in stream.writes if "started" in text)
    assert stream.getvalue() == "started\nfinished\n"
    assert ended - first_arrival > 1.5
