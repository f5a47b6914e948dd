"""Every environment variable of databricks.air's own, named once.

Modules read them through these names (on/off switches with :mod:`databricks.air._switches`), so that a reader can
find every place a variable matters by searching for its name here. The user-facing ones are documented in
``docs/concepts/environment.md``; the last four are bookkeeping that ranks inherit.
"""

from __future__ import annotations

ACCELERATOR_TYPE = "DATABRICKS_AIR_ACCELERATOR_TYPE"
"""``CPU`` runs CPU ranks over gloo, whatever accelerator type the code names."""

SIMULATE_GPUS = "DATABRICKS_AIR_SIMULATE_GPUS"
"""``N`` makes this node look as if it had ``N`` GPUs (for leasing and counting) while ranks run on CPUs: a "
"testing aid."""

SHOW_ALL_RANKS = "DATABRICKS_AIR_SHOW_ALL_RANKS"
"""On: every rank's output is shown live, each line prefixed ``[rank N]`` (default: rank 0's only)."""

LOG_DIR = "DATABRICKS_AIR_LOG_DIR"
"""Where each call's log folder is made (default: ``databricks-air-logs`` in the temp directory)."""

DEBUG = "DATABRICKS_AIR_DEBUG"
"""On: tracebacks keep databricks.air's own frames, and MLflow's INFO records of the call's tracking are shown."""

LOG_KEEP_CALLS = "DATABRICKS_AIR_LOG_KEEP_CALLS"
"""How many calls' log folders are kept (the newest; default 50; ``0``: no limit by count)."""

LOG_KEEP_DAYS = "DATABRICKS_AIR_LOG_KEEP_DAYS"
"""Log folders idle for longer than this many days are removed (default 7; ``0``: no limit by age)."""

START_METHOD = "DATABRICKS_AIR_START_METHOD"
"""``fork`` (default): ranks are forked from the rank server; ``spawn``: each rank is a new interpreter."""

TERMINATE_GRACE_SECONDS = "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS"
"""Seconds a rank may take to end after SIGTERM before it is killed (default 3)."""

SNAPSHOT_SECONDS = "DATABRICKS_AIR_SNAPSHOT_SECONDS"
"""The budget of the look at the ranks (stacks, collectives) before they are stopped (default 5; ``0``: none)."""

STALL_SECONDS = "DATABRICKS_AIR_STALL_SECONDS"
"""Ranks waiting this long in a collective another rank has not reached get a warning (default 600; ``0``: never)."""

STRAGGLER_SECONDS = "DATABRICKS_AIR_STRAGGLER_SECONDS"
"""How often the straggler watch reads when each rank issued its collectives, to name a rank the others wait for
(default 30; ``0``: never)."""

PRELOAD = "DATABRICKS_AIR_PRELOAD"
"""Comma-separated modules the rank server imports once, so that ranks start with them loaded."""

MLFLOW = "DATABRICKS_AIR_MLFLOW"
"""Off (``0``, ``false``, ``no``, ``off``): no MLflow run per call, and ranks do not log loader metrics."""

TRACKING_HOST = "DATABRICKS_AIR_TRACKING_HOST"
"""Off: a script's calls import MLflow themselves rather than use the tracking host, a process of the user's that keeps
MLflow imported between scripts (``_tracking/tracking_host.py``)."""

TRACKING_HOST_IDLE_SECONDS = "DATABRICKS_AIR_TRACKING_HOST_IDLE_SECONDS"
"""How long the tracking host waits for a call before it exits (default 600)."""

LOG_UPLOAD_SECONDS = "DATABRICKS_AIR_LOG_UPLOAD_SECONDS"
"""How often the ranks' logs are uploaded to the call's MLflow run while it runs (default 30)."""

SYSTEM_METRICS = "DATABRICKS_AIR_SYSTEM_METRICS"
"""Off: no system metrics (CPU, memory, GPUs) in the call's MLflow run."""

SYSTEM_METRICS_SECONDS = "DATABRICKS_AIR_SYSTEM_METRICS_SECONDS"
"""The sampling interval of the system metrics (default 10)."""

DATA_CACHE_DIR = "DATABRICKS_AIR_DATA_CACHE_DIR"
"""Where datasets keep their local copies (default: ``databricks-air-data`` in the temp directory)."""

HOME = "DATABRICKS_AIR_HOME"
"""Where the ``air`` workload command keeps its runs, cached environments and secrets (default ``~/.air``)."""

SECRET_PREFIX = "DATABRICKS_AIR_SECRET_"
"""``DATABRICKS_AIR_SECRET_<SCOPE>__<KEY>`` holds a workload secret (for CI systems that inject secrets so)."""

RETRY_DELAY_SECONDS = "DATABRICKS_AIR_RETRY_DELAY_SECONDS"
"""Seconds a workload waits between a failed attempt and its retry."""

WORKLOAD_TIMEOUT_SECONDS = "DATABRICKS_AIR_WORKLOAD_TIMEOUT_SECONDS"
"""A workload attempt's time limit in seconds, in place of ``timeout_minutes`` (for tests)."""

BETA_NOTICE_SHOWN = "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED"
"""Set once the Beta notice was shown (the reference's name), so that ranks and Ray actors do not repeat it."""

SERVERLESS_GPU_WARNED = "DATABRICKS_AIR_SERVERLESS_GPU_WARNED"
"""Set once ``serverless_gpu``'s deprecation warning was shown in this process tree."""

RANK_HOOKS = "DATABRICKS_AIR_RANK_HOOKS"
"""Modules whose ``rank_started()``/``rank_ending()`` each rank runs (set by the caller: tracking's rank side)."""

METRICS_ADDRESS = "DATABRICKS_AIR_METRICS_ADDRESS"
"""The Unix socket of the call's metrics writer (:mod:`databricks.air._tracking.writer`), for the ranks."""

METRICS_KEY = "DATABRICKS_AIR_METRICS_KEY"
"""The key a rank connects to the call's metrics writer with."""

RUN_SNAPSHOT = "DATABRICKS_AIR_RUN_SNAPSHOT"
"""The call's MLflow run as it was created (MLflow's protobuf, base64), so that ranks need not read it back."""

LAST_CHECKPOINT_FILE = "DATABRICKS_AIR_LAST_CHECKPOINT_FILE"
"""Bookkeeping: where rank 0's ``Checkpointer.save`` notes the step it saved, for the launcher's restart line."""
