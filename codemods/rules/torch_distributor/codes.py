"""The codes of the ``TorchDistributor`` migration (AM2xx), each with the one line ``--list-rules`` prints.

``AM201`` (the rewrite) and ``AM217`` (Spark session setup) are rules of their own, documented by their
``DESCRIPTION``; the others are reported by ``AM201`` and documented here (:data:`DESCRIPTIONS`, registered with
``AM201`` as its :attr:`~air_migrate.rule_base.Rule.REPORTS`).
"""

from __future__ import annotations

from typing import Dict

RUN = "AM201"
RANK_ZERO = "AM202"
CPU = "AM203"
IMPORT = "AM204"
VARIABLE = "AM205"
SCRIPT = "AM206"
LOCAL_MODE = "AM207"
CONFIG = "AM208"
TARGET = "AM209"
CONFIGURATIONS = "AM210"
FUNCTION_USED = "AM211"
DISTRIBUTOR_USED = "AM212"
DATAFRAME = "AM213"
DEEPSPEED = "AM214"
WRITEFILE = "AM215"
NAME_CLASH = "AM216"
SPARK_SETUP = "AM217"
NO_TIME_LIMIT = "AM218"

DESCRIPTIONS: Dict[str, str] = {
    RANK_ZERO: "review: a used return value of TorchDistributor.run becomes fn.distributed(...)[0] (rank 0's value, "
    "as before)",
    CPU: 'review: use_gpu=False becomes accelerator_type="CPU" (CPU ranks are an extension of this open runtime)',
    IMPORT: "TorchDistributor's import removed or replaced by `from databricks.air import distributed` (safe)",
    VARIABLE: "a distributor variable removed once its runs are rewritten (safe)",
    SCRIPT: "blocking: run('train.py', ...) runs a script; the decorator form needs a function",
    LOCAL_MODE: "blocking: local_mode=False (several nodes); @distributed(remote=True) on Ray is the counterpart",
    CONFIG: "blocking: a TorchDistributor setting that cannot be carried over (not a literal, unknown, *args)",
    TARGET: "blocking: run's target is not a module-level def of this file (a lambda, method, nested or imported "
    "function...)",
    CONFIGURATIONS: "blocking: one function run in ways that cannot all be rewritten (two configurations)",
    FUNCTION_USED: "blocking: the function is also called or used elsewhere, which the decorator would break",
    DISTRIBUTOR_USED: "blocking: a distributor (or TorchDistributor itself) is used for more than its runs",
    DATAFRAME: "blocking: _train_on_dataframe (Spark-only) has no counterpart",
    DEEPSPEED: "blocking: DeepspeedTorchDistributor (camelCase settings) is migrated by hand",
    WRITEFILE: "blocking: a %%writefile cell or a magic line uses TorchDistributor (not read; a cell in another "
    "language that mentions it is reported as manual)",
    NAME_CLASH: "blocking: `distributed` already names something else, so the decorator cannot be added",
    NO_TIME_LIMIT: "review: the new decorator says timeout=None, since TorchDistributor.run had no time limit "
    "(@distributed's default stops a call after 3 hours)",
}
