"""What the straggler watch finds, kept where a user looks: the call's handle and its MLflow run.

:class:`StragglerRecord` is the :attr:`Launch.on_stragglers <databricks.air._engine.call.Launch.on_stragglers>` of a
``.distributed()`` or ``.submit()`` call (:mod:`databricks.air._engine.straggler_watch` sends it each window):

* a straggler named goes into the handle's :attr:`~databricks.air.asynchronous.DistributedFunctionCall.stragglers`
  (one that ends is the same object, its ``ended_at`` set);
* each window's figures become metrics of the call's run, its number the step, through the caller's one metrics
  writer where the call runs one (:mod:`databricks.air._tracking.writer`): ``straggler/late_seconds/rank_<r>``,
  ``straggler/last_fraction/rank_<r>`` and ``collectives_per_second``;
* the run's tag ``databricks.air.straggler`` holds the rank while one is named, and goes when none is.

A store that fails is said once; the call goes on.
"""

from __future__ import annotations

from typing import Any, Optional
from databricks.air._notices import notice

STRAGGLER_TAG = "databricks.air.straggler"


class StragglerRecord:
    """Takes the straggler watch's news into ``handle`` and ``run`` (a ``call_run.CallRun``, or ``None``)."""

    def __init__(self, handle: Any, run: Optional[Any]) -> None:
        self.handle = handle
        self.run = run
        self._failed = False

    def __call__(self, news: Any) -> None:
        if news.named is not None:
            self.handle.stragglers.append(news.named)
        if self.run is None or self._failed:
            return
        try:
            self.run.log_call_metrics(news.window.metrics(), step=news.window.number)
            if news.named is not None:
                self.run.set_tag(STRAGGLER_TAG, str(news.named.rank))
            elif news.ended is not None:
                self.run.delete_tag(STRAGGLER_TAG)
        except Exception as error:  # noqa: BLE001 - the run's store must never stop the call
            self._failed = True
            notice(f"could not record the straggler figures in the MLflow run: {error}")
