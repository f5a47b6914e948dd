"""What the TorchDistributor rewrite keeps that a reader might not see (issue 16, items 5, 8 and 9): no time limit
(``timeout=None``, reported for review), distributors rebound cell by cell, a count held in a variable, and every
comment of what is taken out."""

from __future__ import annotations

import json
from typing import Any, List, Tuple

import pytest
from cli_fixtures import notebook

from air_migrate.engine import migrate_file
from air_migrate.results import Record
from air_migrate.rules import REGISTRY

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
IMPORT = "from pyspark.ml.torch.distributor import TorchDistributor\n"
SEPARATOR = "\n# COMMAND ----------\n\n"


def migrate(source: str, path: str = "job.py", **options: Any) -> Tuple[str, List[str]]:
    result = migrate_file(path, source.encode(), RULES, **options)
    assert result.error is None, result.error
    records = sorted(result.records, key=Record.sort_key)
    return (result.migrated or result.original).decode(), [str(record) for record in records]


def items(report: List[str]) -> List[str]:
    return [line.split(": ", 1)[1] for line in report if " manual " in line or " blocking " in line]


# --- item 8: no time limit, as before ---------------------------------------------------------------------------


def test_the_new_decorator_keeps_no_time_limit_in_plain_sight_and_says_how_to_choose_a_cap() -> None:
    source = f"{IMPORT}\n\ndef fine_tune(epochs):\n    return epochs\n\n\nTorchDistributor(num_processes=8).run(fine_tune, 3)\n"
    out, report = migrate(source)
    assert "@distributed(num_accelerators=8, timeout=None)\ndef fine_tune(epochs):" in out
    assert "job.py:4:1: AM218 review timeout=None keeps TorchDistributor.run's behaviour: no time limit. Without " \
           "it, @distributed stops a call after 3 hours (timeout=10800 s) and raises LocalExecutionTimeoutError; " \
           "to cap fine_tune, write timeout=SECONDS, the longest run you expect with a margin" in report
    assert migrate(out) == (out, [])


@pytest.mark.parametrize(
    "arguments, decorator",
    [("torch.cuda.device_count()", "@distributed(timeout=None)"),
     ("2, use_gpu=False", '@distributed(num_accelerators=2, accelerator_type="CPU", timeout=None)')],
)
def test_every_decorator_form_says_timeout_none(arguments: str, decorator: str) -> None:
    source = f"import torch\n{IMPORT}\ndef train():\n    return 1\n\nTorchDistributor({arguments}).run(train)\n"
    assert f"{decorator}\ndef train():" in migrate(source)[0]

