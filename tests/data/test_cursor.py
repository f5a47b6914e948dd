"""The epoch cursor on its own: passes begin, advance, release and end; jumps make older passes stale."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, List

from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.control import Control
from databricks.air.data.cursor import UNPUBLISHED, EpochCursor
from databricks.air.data.plan import Layout

# rank 0 of 2 over 9 files: a share of 5, in batches of 2 (the last one partial)
LAYOUT = Layout.of(count=9, rank=0, world_size=2, equalize="pad", batch_size=2, drop_last=False)


def _published(control: Control) -> List[int]:
    return [control.get(name) for name in ("pass_id", "epoch", "start", "released")]


def test_a_layout_holds_the_share_and_the_batch_rule() -> None:
    assert (LAYOUT.share, LAYOUT.batches(0), LAYOUT.batches(3)) == (5, 3, 1)
    assert list(LAYOUT.positions(0, num_workers=2, worker_id=1)) == [2, 3]
    dropping = Layout.of(count=9, rank=0, world_size=2, equalize="pad", batch_size=2, drop_last=True)
    assert not LAYOUT.complete(4) and dropping.complete(4)  # one file left: no whole batch under drop_last
    assert LAYOUT.complete(5) and dropping.complete(5)


def test_a_pass_begins_where_the_cursor_is_and_is_published() -> None:
    cursor, control = EpochCursor(), Control()
    cursor.jump(2, delivered=3)
    current = cursor.begin(LAYOUT, control)
    assert (current.pass_id, current.epoch, current.start) == (1, 2, 3)
    assert _published(control) == [1, 2, 3, 3]
    assert cursor.published(LAYOUT) == current  # what a worker reads back from the control block
    again = cursor.begin(LAYOUT, control)
    assert again.pass_id == 2 and _published(control)[0] == 2


def test_advance_counts_up_to_the_share_and_release_tells_the_control_block() -> None:
    cursor, control = EpochCursor(), Control()
    current = cursor.begin(LAYOUT, control)
    cursor.advance(current, 2)
    cursor.release(current)
    assert cursor.delivered == 2 and control.get("released") == 2
    cursor.release(current, upto=3)  # direct iteration: before handing out position 3
    assert control.get("released") == 3
    for _ in range(3):
        cursor.advance(current, 2)
    assert cursor.delivered == 5  # never past the share, whatever the last batch's size


def test_a_pass_that_ends_moves_to_the_next_epoch_and_clears_the_skipped_files() -> None:
    cursor = EpochCursor()
    current = cursor.begin(LAYOUT, Control())
    cursor.advance(current, 2)
    cursor.skip("f0003.bin")
    assert (cursor.epoch, cursor.delivered, cursor.skipped) == (0, 2, ["f0003.bin"])
    cursor.end(current)
    assert (cursor.epoch, cursor.delivered, cursor.skipped) == (1, 0, [])


def test_an_epoch_read_to_its_end_is_the_next_one_s_start() -> None:
    cursor = EpochCursor()
    cursor.jump(4, delivered=5)
    assert cursor.position(LAYOUT) == (5, 0)
    assert cursor.begin(LAYOUT, Control()).epoch == 5


def test_a_jump_makes_older_passes_stale_and_their_end_changes_nothing() -> None:
    cursor = EpochCursor()
    current = cursor.begin(LAYOUT, Control())
    assert cursor.holds(current)
    cursor.jump(7, delivered=1, skipped=["f0001.bin"])
    assert not cursor.holds(current)
    cursor.end(current)
    assert (cursor.epoch, cursor.delivered, cursor.skipped) == (7, 1, ["f0001.bin"])


def test_a_pass_nobody_published_has_no_control_block() -> None:
    cursor = EpochCursor()
    cursor.jump(1, delivered=2)
    current = cursor.unpublished(LAYOUT)
    assert (current.pass_id, current.epoch, current.start, current.control) == (UNPUBLISHED, 1, 2, None)
    cursor.release(current)  # nothing to tell, and no error


def test_a_served_pass_is_taken_once() -> None:
    cursor = EpochCursor()
    current = cursor.begin(LAYOUT, Control())
    cursor.serve(current)
    assert cursor.take_served() is current
    assert cursor.take_served() is None


class _Names(UCVolumeDataset):
    """A dataset that yields file names instead of paths, as a user's subclass would load or decode them."""

    def __iter__(self):  # type: ignore[override]
        for path in super().__iter__():
            yield os.path.basename(path)


def test_a_subclass_s_iter_is_served_the_loader_s_pass_with_and_without_workers(files: Callable[..., Path]) -> None:
    folder = files(10)
    for workers in (0, 1):
        loader = DataLoader(_Names(folder), batch_size=4, num_workers=workers)
        batches = iter(loader)
        assert next(batches) == ["f0000.bin", "f0001.bin", "f0002.bin", "f0003.bin"]
        assert loader.state_dict()["delivered"] == 4, workers  # counted once, by the loader
        assert [len(batch) for batch in batches] == [4, 2]
        assert (loader.state_dict()["epoch"], loader.state_dict()["delivered"]) == (1, 0)
        assert list(loader.dataset)[:2] == ["f0000.bin", "f0001.bin"]  # then a direct iteration of its own


def test_a_control_block_opened_while_it_is_being_created_reads_zeros_and_keeps_what_is_written(tmp_path: Path) -> None:
    path = tmp_path / "control"
    path.touch()  # created by another process, its bytes not written yet
    assert _published(Control(str(path))) == [0, 0, 0, 0]
    Control(str(path)).set(pass_id=3, released=7)
    assert _published(Control(str(path))) == [3, 0, 0, 7]
