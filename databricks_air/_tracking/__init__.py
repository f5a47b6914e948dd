"""MLflow tracking of a call: the call's run in the caller, and what each rank logs into it.

How a rank's metric reaches the store:

1. ``mlflow.log_metric`` in a rank is caught by the rank side (:mod:`.rank_side`, a rank hook the caller names) and
   queued in the rank's buffer (:mod:`.rank_buffer`), in microseconds;
2. once a second the buffer hands a batch to the call's writer in the caller, over a Unix socket (:mod:`.wire`, the
   messages and the rank's end of the socket), or writes it itself where the caller cannot be reached;
3. the writer (:mod:`.writer`) puts the ranks' batches together and writes them into the call's run, which
   :mod:`.call_run` opens and, once every batch is written, ends.

Around them: :mod:`.warmup` imports MLflow and opens the store ahead of the first call, :mod:`.quiet` keeps MLflow's
INFO records of our own tracking out of sight, :mod:`.progress` shows a passing line while a new store is made, and
:mod:`.straggler_record` puts the straggler watch's findings into the run and the call's handle.

Nothing is imported here, so that :mod:`.warmup` (imported by ``databricks.air`` at decoration, and after a
notebook's importing cell) stays light: MLflow is imported in its thread, or when a call's run is opened.
"""
