"""Where the training loop is in one rank's epochs, and the passes that move it there.

A position is ``(epoch, delivered)``: how many of this rank's files of ``epoch`` the training loop has received (see
:mod:`~databricks.air.data.state`). A dataset owns one :class:`EpochCursor`; whoever hands its items to the
training loop (the dataset itself when iterated directly, else the DataLoader, which the dataset hands the
cursor) moves it through a :class:`Pass`:

* :meth:`~EpochCursor.begin` settles the position (an epoch read to its end is the next epoch's start), numbers
  the pass, and publishes it on the control block for the DataLoader's workers (without workers, the DataLoader
  leaves it to the dataset's next iteration in this process with :meth:`~EpochCursor.serve`);
* :meth:`~EpochCursor.advance` counts what the training loop received, a batch at a time (a dataset iterated
  directly sets ``delivered`` item by item itself);
* :meth:`~EpochCursor.release` tells the workers which positions have been used, so that their files may be
  evicted from the cache;
* :meth:`~EpochCursor.end` moves to the start of the next epoch once a pass has run to its end.

:meth:`~EpochCursor.jump` (``set_epoch``, ``load_state_dict``) moves the position and starts a new *generation*: a
pass begun before it no longer :meth:`~EpochCursor.holds`, and its iterator stops at its next item instead of
counting into the new position.

Example (what a DataLoader without workers does)::

    current = cursor.begin(layout, Control())
    for batch in batches:
        cursor.release(current)        # the previous batch has been used
        cursor.advance(current, len(batch))
    cursor.end(current)                # the next pass reads the next epoch
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from databricks.air.data.control import Control
from databricks.air.data.plan import Layout

UNPUBLISHED = -1  # the pass id of a pass nobody published (a plain torch DataLoader's worker)


@dataclass(frozen=True)
class Pass:
    """One pass over (the rest of) an epoch, as it was begun."""

    pass_id: int
    epoch: int
    start: int  # the first position it delivers
    generation: int  # the cursor's generation when it began
    layout: Layout
    control: Optional[Control]  # where its consumer says what it has used; None: nobody does


class EpochCursor:
    """The position of one rank in its epochs: ``epoch``, ``delivered``, ``generation`` and ``skipped``.

    ``skipped`` names the files of this epoch given up under ``on_error="skip"``; it is saved with the position
    and cleared with each new epoch.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.delivered = 0
        self.generation = 0
        self.skipped: List[str] = []
        self._control = Control()  # the last begun pass's; a worker reads the pass it runs from it
        self._passes = 0
        self._served: Optional[Pass] = None

    def position(self, layout: Layout) -> Tuple[int, int]:
        """``(epoch, delivered)``, the next epoch's start when nothing is left in this one."""
        if self.delivered > 0 and layout.complete(self.delivered):
            return self.epoch + 1, 0
        return self.epoch, self.delivered

    def jump(self, epoch: int, delivered: int = 0, skipped: Optional[List[str]] = None) -> None:
        """Move to ``(epoch, delivered)``; passes begun before no longer hold."""
        self.epoch, self.delivered, self.skipped = epoch, delivered, list(skipped or [])
        self.generation += 1

    def begin(self, layout: Layout, control: Control) -> Pass:
        """Start a pass from the settled position and publish it on ``control``. Main process only."""
        self.epoch, self.delivered = self.position(layout)
        self._passes += 1
        self._control = control
        control.set(pass_id=self._passes, epoch=self.epoch, start=self.delivered, released=self.delivered)
        return Pass(self._passes, self.epoch, self.delivered, self.generation, layout, control)

    def published(self, layout: Layout) -> Pass:
        """In a worker of the DataLoader: the pass the main process began last, read from the control block."""
        control = self._control
        return Pass(
            control.get("pass_id"), control.get("epoch"), control.get("start"), self.generation, layout, control
        )

    def unpublished(self, layout: Layout) -> Pass:
        """A pass from this copy's own position, that nobody publishes or releases (a plain torch DataLoader's
        worker, which cannot hear from the main process)."""
        epoch, start = self.position(layout)
        return Pass(UNPUBLISHED, epoch, start, self.generation, layout, None)

    def serve(self, current: Pass) -> None:
        """Have the next iteration of the dataset in this process read ``current``, which a DataLoader without
        workers began: the loader then iterates the dataset as torch does, through any override of
        ``__iter__``, and counts and releases what it receives itself."""
        self._served = current

    def take_served(self) -> Optional[Pass]:
        """The pass :meth:`serve` left for this iteration, once; ``None``: the iteration begins its own."""
        current, self._served = self._served, None
        return current

    def holds(self, current: Pass) -> bool:
        """False once the position has jumped since ``current`` began."""
        return current.generation == self.generation

    def advance(self, current: Pass, count: int) -> None:
        """The training loop received ``count`` more positions of ``current``."""
        self.delivered = min(self.delivered + count, current.layout.share)

    def release(self, current: Pass, upto: Optional[int] = None) -> None:
        """Every position of ``current`` before ``upto`` (default: those delivered) has been used."""
        if current.control is not None:
            current.control.set(released=self.delivered if upto is None else upto)

    def skip(self, *names: str) -> None:
        """Record files of this epoch that were given up (``on_error="skip"``)."""
        self.skipped.extend(names)

    def end(self, current: Pass) -> None:
        """``current`` ran to its end: the next pass starts the following epoch (unless the position jumped)."""
        if self.holds(current):
            self.epoch, self.delivered, self.skipped = current.epoch + 1, 0, []
