"""Which file each rank and each worker yields, at which position: pure functions of the listing and the settings.

An epoch is planned in three steps, so that every rank and every DataLoader worker can compute its own part
without talking to the others:

1. **Order.** The listing's order, or a permutation seeded by (listing fingerprint, seed, epoch).
2. **Rank share.** With ``equalize="pad"`` the order is extended by repeating its head until every rank gets
   ``ceil(N / R)`` files; with ``"drop"`` it is cut to ``floor(N / R)`` per rank; with ``"none"`` nothing changes.
   Rank ``r`` takes positions ``r, r + R, r + 2R, ...``: with ``"none"``, one batch at a time, this is exactly the
   reference's stride ``files[worker_id * R + rank :: R * W]``.
3. **Batches to workers.** The rank's share is cut into batches of ``batch_size``; batch ``i`` of the pass goes
   to worker ``i % W``. torch's DataLoader asks its workers for batches in turn, so the rank receives its share in
   order whatever the number of workers, only the last batch can be partial, and every rank with the same share
   length yields the same number of batches.

A pass can start part-way into the share (a resumed epoch): its remaining positions are dealt to workers the same
way, from the first remaining batch. :class:`Layout` holds what steps 2 and 3 depend on besides the epoch, for one
rank: its share's length and the batch rule.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from itertools import chain
from typing import Iterator, List, Sequence

EQUALIZE_MODES = ("pad", "drop", "none")


def epoch_order(count: int, fingerprint: str, seed: int, epoch: int, shuffle: bool) -> List[int]:
    """Indices into the listing in this epoch's order: a pure function of (fingerprint, seed, epoch)."""
    order = list(range(count))
    if shuffle:
        material = f"{fingerprint}:{seed}:{epoch}".encode()
        random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big")).shuffle(order)
    return order


def share_length(count: int, world_size: int, rank: int, equalize: str) -> int:
    """How many files rank ``rank`` yields in one epoch."""
    if equalize == "pad":
        return -(-count // world_size)
    if equalize == "drop":
        return count // world_size
    return len(range(rank, count, world_size))


def rank_share(order: Sequence[int], world_size: int, rank: int, equalize: str) -> List[int]:
    """The listing indices rank ``rank`` yields this epoch, in order."""
    count = len(order)
    length = share_length(count, world_size, rank, equalize)
    if count == 0:
        return []
    return [order[(rank + world_size * i) % count] for i in range(length)]


def padded_files(count: int, world_size: int, equalize: str) -> int:
    """How many extra (repeated) files ``"pad"`` adds over all ranks in one epoch."""
    return world_size * share_length(count, world_size, 0, "pad") - count if equalize == "pad" else 0


def dropped_positions(order: Sequence[int], world_size: int, equalize: str) -> List[int]:
    """The listing indices that ``"drop"`` leaves out this epoch (the tail of the order)."""
    if equalize != "drop":
        return []
    kept = world_size * (len(order) // world_size)
    return list(order[kept:])


def pass_batches(share: int, start: int, batch_size: int, drop_last: bool) -> int:
    """How many batches a pass that starts at position ``start`` of a share of ``share`` files delivers."""
    remaining = max(share - start, 0)
    return remaining // batch_size if drop_last else -(-remaining // batch_size)


def worker_batches(
    share: int, start: int, batch_size: int, drop_last: bool, num_workers: int, worker_id: int
) -> Iterator[range]:
    """The batches (ranges of positions in the rank's share) that worker ``worker_id`` of ``num_workers`` yields
    in a pass that starts at position ``start``, in order."""
    batches = pass_batches(share, start, batch_size, drop_last)
    for batch in range(worker_id, batches, num_workers):
        first = start + batch * batch_size
        yield range(first, min(first + batch_size, share))


def worker_positions(
    share: int, start: int, batch_size: int, drop_last: bool, num_workers: int, worker_id: int
) -> Iterator[int]:
    """Positions in the rank's share that worker ``worker_id`` of ``num_workers`` yields in this pass, in order."""
    # chained in C: the training loop pays for this once per batch, not once per file
    return chain.from_iterable(worker_batches(share, start, batch_size, drop_last, num_workers, worker_id))


def pass_complete(share: int, delivered: int, batch_size: int, drop_last: bool) -> bool:
    """True when nothing more would be delivered from position ``delivered`` (an epoch edge)."""
    remaining = share - delivered
    return remaining <= 0 or (drop_last and remaining < batch_size)


@dataclass(frozen=True)
class Layout:
    """How one rank's epochs are cut: the same in every epoch while the rank's place and the batching stay.

    Example::

        layout = Layout.of(count=10, rank=1, world_size=4, equalize="pad", batch_size=2, drop_last=False)
        layout.share                # 3 files per epoch
        layout.batches(start=0)     # 2 batches: positions [0, 1] and [2]
    """

    rank: int
    world_size: int
    share: int  # files the rank yields per epoch
    batch_size: int
    drop_last: bool

    @classmethod
    def of(cls, count: int, rank: int, world_size: int, equalize: str, batch_size: int, drop_last: bool) -> "Layout":
        """The layout of rank ``rank`` of ``world_size`` over a listing of ``count`` files."""
        return cls(rank, world_size, share_length(count, world_size, rank, equalize), batch_size, drop_last)

    def batches(self, start: int) -> int:
        """How many batches a pass that starts at position ``start`` delivers."""
        return pass_batches(self.share, start, self.batch_size, self.drop_last)

    def positions(self, start: int, num_workers: int, worker_id: int) -> Iterator[int]:
        """The positions worker ``worker_id`` of ``num_workers`` yields in a pass that starts at ``start``."""
        return worker_positions(self.share, start, self.batch_size, self.drop_last, num_workers, worker_id)

    def complete(self, delivered: int) -> bool:
        """True when a pass would deliver nothing more after ``delivered`` positions (an epoch edge)."""
        return pass_complete(self.share, delivered, self.batch_size, self.drop_last)
