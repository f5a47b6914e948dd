"""Partitioning sweeps: exactly-once cover, equal samples and equal batches per rank, seeded shuffles.

These run the planning functions that every worker runs (``databricks.air.data.plan``) over the anchor sweeps;
``test_dataset.py`` checks on smaller cases that real DataLoader workers yield exactly what the plan says.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from typing import List

import pytest

from databricks.air.data import plan


def _streams(n: int, world: int, workers: int, batch: int, equalize: str, shuffle: bool = False) -> List[list]:
    """Every (rank, worker) stream of listing indices for epoch 0, as torch's workers would yield them."""
    order = plan.epoch_order(n, "fp", 0, 0, shuffle)
    streams = []
    for rank in range(world):
        share = plan.rank_share(order, world, rank, equalize)
        for worker in range(max(workers, 1)):
            positions = plan.worker_positions(len(share), 0, batch, False, max(workers, 1), worker)
            streams.append([share[p] for p in positions])
    return streams


A1_CELLS = [
    (world, workers, n)
    for world in (1, 2, 3, 4, 8)
    for workers in (0, 1, 2, 3, 6)
    for n in sorted({1, world * max(workers, 1) - 1, world * max(workers, 1), world * max(workers, 1) + 1, 97, 1000})
    if n >= 1
]


@pytest.mark.parametrize("batch", [1, 4])
def test_a1_every_file_exactly_once_with_none(batch: int) -> None:
    for world, workers, n in A1_CELLS:
        got = Counter(itertools.chain.from_iterable(_streams(n, world, workers, batch, "none")))
        assert got == Counter(range(n)), (world, workers, n)


@pytest.mark.parametrize("batch", [1, 4])
def test_a1_pad_covers_everything_with_fewer_than_world_repeats(batch: int) -> None:
    for world, workers, n in A1_CELLS:
        got = Counter(itertools.chain.from_iterable(_streams(n, world, workers, batch, "pad")))
        assert set(got) == set(range(n)), (world, workers, n)
        repeats = sum(got.values()) - n
        assert repeats == world * -(-n // world) - n <= world - 1 or n < world, (world, workers, n)
        assert repeats == plan.padded_files(n, world, "pad")


@pytest.mark.parametrize("batch", [1, 4])
def test_a1_drop_loses_fewer_than_world_files_and_reports_which(batch: int) -> None:
    for world, workers, n in A1_CELLS:
        got = Counter(itertools.chain.from_iterable(_streams(n, world, workers, batch, "drop")))
        assert max(got.values(), default=1) == 1
        missing = set(range(n)) - set(got)
        assert len(missing) == n % world <= world - 1
        assert missing == set(plan.dropped_positions(plan.epoch_order(n, "fp", 0, 0, False), world, "drop"))


def test_b1_every_rank_gets_the_same_number_of_samples_with_pad_and_drop() -> None:
    for world, workers, n in A1_CELLS:
        for equalize in ("pad", "drop"):
            per_rank = [plan.share_length(n, world, rank, equalize) for rank in range(world)]
            order = plan.epoch_order(n, "fp", 0, 0, False)
            assert [len(plan.rank_share(order, world, r, equalize)) for r in range(world)] == per_rank
            assert len(set(per_rank)) == 1, (world, workers, n, equalize)


def _torch_batches(items: int, batch: int, drop_last: bool) -> int:
    """Batches torch's fetcher makes from one worker's stream of ``items`` samples."""
    return items // batch if drop_last else -(-items // batch)


@pytest.mark.slow
def test_b2_equal_batches_per_rank_over_the_whole_sweep() -> None:
    """95,952 configurations: N < 2000, R in {2,4,8}, W in {1,2,4,6}, B in {1,4,8,32}; the reference's stride
    gives ranks different batch counts in about a quarter of them, this plan in none."""
    ours_unequal = reference_unequal = total = 0
    rank_batches = functools.lru_cache(maxsize=None)(
        lambda share, batch, workers: sum(
            _torch_batches(sum(len(b) for b in plan.worker_batches(share, 0, batch, False, workers, w)), batch, False)
            for w in range(workers)
        )
    )  # a pure function of its arguments: computed once per distinct share
    for world, workers, batch in itertools.product((2, 4, 8), (1, 2, 4, 6), (1, 4, 8, 32)):
        for n in range(1, 2000):
            total += 1
            ours = {rank_batches(plan.share_length(n, world, rank, "pad"), batch, workers) for rank in range(world)}
            ours_unequal += len(ours) > 1
            reference = {
                sum(
                    _torch_batches(len(range(w * world + rank, n, world * workers)), batch, False)
                    for w in range(workers)
                )
                for rank in range(world)
            }
            reference_unequal += len(reference) > 1
    assert total == 95_952
    assert ours_unequal == 0
    assert 0.2 < reference_unequal / total < 0.3  # the sweep does exercise the hard cases


def test_b3_at_most_one_partial_batch_and_drop_last_loses_less_than_one_batch() -> None:
    # The anchor case: 22 files, 3 workers, batches of 4 (plain per-worker batching: 2 partial batches, and
    # drop_last keeps only 16 of 22).
    sizes = []
    for worker in range(3):
        stream = list(plan.worker_batches(22, 0, 4, False, 3, worker))
        sizes += [len(b) for b in stream]
    assert sorted(sizes, reverse=True) == [4, 4, 4, 4, 4, 2]
    kept = sum(len(b) for w in range(3) for b in plan.worker_batches(22, 0, 4, True, 3, w))
    assert kept == 20  # 2 lost: fewer than one batch
    for world, workers, batch in itertools.product((1, 2, 4), (1, 2, 3, 6), (1, 4, 8)):
        for n in (1, 7, 22, 97, 250):
            share = plan.share_length(n, world, 0, "pad")
            sizes = [len(b) for w in range(workers) for b in plan.worker_batches(share, 0, batch, False, workers, w)]
            assert sum(1 for s in sizes if s < batch) <= 1
            kept = sum(len(b) for w in range(workers) for b in plan.worker_batches(share, 0, batch, True, workers, w))
            assert share - kept < batch


def test_the_rank_receives_its_share_in_order_whatever_the_number_of_workers() -> None:
    share = 37
    for workers, batch in itertools.product((1, 2, 3, 5), (1, 4, 6)):
        streams = [iter(list(plan.worker_batches(share, 0, batch, False, workers, w))) for w in range(workers)]
        received = []
        for task in itertools.count():  # torch asks worker task % workers for the next batch, in turn
            got = next(streams[task % workers], None)
            if got is None:
                break
            received += list(got)
        assert received == list(range(share)), (workers, batch)


def test_c1_shuffle_is_a_pure_function_of_listing_seed_and_epoch() -> None:
    first = plan.epoch_order(500, "abc", 7, 3, True)
    assert first == plan.epoch_order(500, "abc", 7, 3, True)
    assert sorted(first) == list(range(500)) and first != list(range(500))
    assert first != plan.epoch_order(500, "abc", 8, 3, True)
    assert first != plan.epoch_order(500, "abd", 7, 3, True)
    for n in (100, 1000):
        for epoch in range(5):
            a = plan.epoch_order(n, "abc", 0, epoch, True)
            b = plan.epoch_order(n, "abc", 0, epoch + 1, True)
            assert sum(x != y for x, y in zip(a, b)) > 0.9 * n


def test_c2_the_epoch_order_does_not_depend_on_ranks_or_workers() -> None:
    n = 53
    order = plan.epoch_order(n, "fp", 1, 2, True)
    for world, workers in ((1, 1), (2, 2), (4, 3)):
        shares = [plan.rank_share(order, world, r, "none") for r in range(world)]
        merged = [shares[i % world][i // world] for i in range(n)]
        assert merged == order
        for rank, share in enumerate(shares):
            dealt = sorted(
                p for w in range(workers) for p in plan.worker_positions(len(share), 0, 4, False, workers, w)
            )
            assert dealt == list(range(len(share)))


def test_with_one_file_per_batch_and_none_the_split_is_the_reference_stride() -> None:
    n, world, workers = 50, 3, 4
    order = plan.epoch_order(n, "fp", 0, 0, False)
    for rank in range(world):
        share = plan.rank_share(order, world, rank, "none")
        for worker in range(workers):
            ours = [share[p] for p in plan.worker_positions(len(share), 0, 1, False, workers, worker)]
            assert ours == list(range(n))[worker * world + rank :: world * workers]


def test_a_resumed_pass_deals_only_the_remaining_positions_in_order() -> None:
    for start in range(0, 23):
        for workers, batch in itertools.product((1, 2, 3), (1, 4)):
            streams = [iter(list(plan.worker_batches(23, start, batch, False, workers, w))) for w in range(workers)]
            received = []
            for task in itertools.count():
                got = next(streams[task % workers], None)
                if got is None:
                    break
                received += list(got)
            assert received == list(range(start, 23))
