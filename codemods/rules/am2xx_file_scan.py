"""The whole-file look of the ``TorchDistributor`` rewrite, taken before any cell is parsed.

A file that mentions ``TorchDistributor`` has every Python cell parsed (the function may be defined in a cell that
never names it), and this scan finds what no parse shows:

* where the Python process restarts (``%pip``, ``%restart_python``, ``dbutils.library.restartPython()``): a name
  imported before such a line is gone after it, so the ``distributed`` import must come after the last restart
  before the function it decorates;
* ``%%writefile`` cells (Jupyter, or Databricks ``# MAGIC`` cells) that mention ``TorchDistributor``: they write a
  script that runs under torchrun, which has no decorator form (``AM215``, blocking).
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

from air_migrate.rules.am2xx_codes import WRITEFILE
from air_migrate.rules.am2xx_facts import Where
from air_migrate.rules.base import FileScan, Finding
from air_migrate.sources import SourceFile

WORD = "TorchDistributor"
RESTARTS = "am2xx_restarts"
"""The scratch key of the restart points, a tuple of :data:`~air_migrate.rules.am2xx_facts.Where`."""
_RESTART = re.compile(
    r"^[ \t]*(?:# MAGIC[ \t]*)?(?:%pip\b|%restart_python\b|(?:dbutils\.library\.)?restartPython[ \t]*\()"
)
_WRITEFILE = re.compile(r"^(?P<lead>[ \t]*(?:# MAGIC[ \t]*)?)%%(?:writefile|file)\b")
_CELL_LANGUAGE = re.compile(r"^(?:%%|# MAGIC[ \t]*%)(?P<magic>[\w-]+)")
"""A cell magic, or the magic of a Databricks ``# MAGIC`` cell: what language the cell holds."""
_PYTHON_MAGICS = ("python", "python3", "time", "timeit", "capture", "prun")


def may_read_python_names(texts: Sequence[str]) -> List[str]:
    """The pieces of unparsed code that may read the notebook's Python names: masked line magics (``%time f()``)
    and Python cells that did not parse, but not cells in another language (``%%bash``, ``%%writefile``, Databricks
    ``# MAGIC %sql``...), where ``train`` in ``%%writefile train.py`` is a file name."""
    kept = []
    for text in texts:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if first.startswith("# DBTITLE"):
            first = next((line.strip() for line in text.splitlines()[1:] if line.strip()), "")
        magic = _CELL_LANGUAGE.match(first)
        if magic is None or magic.group("magic") in _PYTHON_MAGICS:
            kept.append(text)
    return kept


def mentions_torch_distributor(source: SourceFile) -> bool:
    """Some code cell of the file holds the word ``TorchDistributor``."""
    return any(cell.code and WORD in cell.raw for cell in source.cells)


def scan_torch_distributor(source: SourceFile) -> Optional[FileScan]:
    """The scan of a file that mentions ``TorchDistributor`` (``None`` for any other file)."""
    if not mentions_torch_distributor(source):
        return None
    restarts: List[Where] = []
    findings: List[Tuple[int, Finding]] = []
    for cell in source.cells:
        if not cell.code:
            continue
        lines = cell.raw.splitlines()
        restarts.extend((cell.number, index, 1) for index, line in enumerate(lines, start=1) if _RESTART.match(line))
        if cell.text is None and WORD in cell.raw:
            finding = _writefile_finding(lines)
            if finding is not None:
                findings.append((cell.number, finding))
    return FileScan(parse_all=True, findings=tuple(findings), scratch={RESTARTS: tuple(restarts)})


def _writefile_finding(lines: List[str]) -> Optional[Finding]:
    for index, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("# DBTITLE"):
            continue
        found = _WRITEFILE.match(line)
        if found is None:
            return None
        return Finding(
            WRITEFILE, index, found.end("lead") + 1,
            "this %%writefile cell writes a script that uses TorchDistributor; scripts run with torchrun and have "
            "no decorator form, so air-migrate leaves it: move the training code into a function of this notebook "
            "decorated with @distributed(...), or migrate the script by hand",
            attention=True, blocking=True,
        )
    return None
