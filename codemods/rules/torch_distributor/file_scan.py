"""The whole-file look of the ``TorchDistributor`` rewrite, taken before any cell is parsed.

A file that mentions ``TorchDistributor`` has every Python cell parsed (the function may be defined in a cell that
never names it), and this scan finds what no parse shows:

* where the Python process restarts (``%pip``, ``%restart_python``, ``dbutils.library.restartPython()``): a name
  imported before such a line is gone after it, so the ``distributed`` import must come after the last restart
  before the function it decorates;
* ``%%writefile`` cells (Jupyter, or Databricks ``# MAGIC`` cells) that mention ``TorchDistributor``: they write a
  script that runs under torchrun, which has no decorator form (``AM215``, blocking);
* the names the rewrite can concern (:func:`relevant_words`), found with :mod:`ast`, which is much cheaper than
  libcst: only the cells that mention one of them are parsed and surveyed (they hold every binding and every read
  of those names), so the other rules do not pay for the rest of a long notebook either.
"""

from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

from air_migrate.rules.torch_distributor.codes import WRITEFILE
from air_migrate.rules.torch_distributor.facts import Where
from air_migrate.rule_base import FileScan, Finding, Severity
from air_migrate.sources import SourceFile

WORD = "TorchDistributor"
RESTARTS = "torch_distributor.restarts"
"""The scratch key of the restart points, a tuple of :data:`~air_migrate.rules.torch_distributor.facts.Where`."""
RELEVANT = "torch_distributor.relevant"
"""The scratch key of the pattern that finds, in a cell's text, a word the rewrite can concern."""
_ALWAYS_RELEVANT = (
    "TorchDistributor",
    "DeepspeedTorchDistributor",
    "pyspark",
    "distributed",
    "databricks",
    "serverless_gpu",
)
_METHODS = ("run", "_train_on_dataframe")
_RESTART = re.compile(
    r"^[ \t]*(?:# MAGIC[ \t]*)?(?:%pip\b|%restart_python\b|(?:dbutils\.library\.)?restartPython[ \t]*\()"
)
_WRITEFILE = re.compile(r"^(?P<lead>[ \t]*(?:# MAGIC[ \t]*)?)%%(?:writefile|file)\b")
_CELL_LANGUAGE = re.compile(r"^(?:# MAGIC[ \t]*)?%%?(?P<magic>[\w-]+)")
"""A magic (of a cell, a line, or a Databricks ``# MAGIC`` cell): what language the rest holds."""
_OTHER_LANGUAGES = frozenset(
    {
        "sh",
        "bash",
        "sql",
        "md",
        "md-sandbox",
        "markdown",
        "scala",
        "r",
        "fs",
        "writefile",
        "file",
        "html",
        "javascript",
        "js",
        "latex",
        "perl",
        "ruby",
        "svg",
        "pip",
        "conda",
        "run",
        "restart_python",
    }
)
"""Magics whose text cannot read the notebook's Python names (``%%writefile train.py`` names a file)."""


def may_read_python_names(texts: Sequence[str]) -> List[str]:
    """The pieces of unparsed code that may read the notebook's Python names: masked line magics (``%time f()``)
    and Python cells that did not parse, but not magics in another language (``%%bash``, ``%%writefile``,
    ``%pip``, Databricks ``# MAGIC %sql``...), where ``train`` in ``%%writefile train.py`` is a file name."""
    kept = []
    for text in texts:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if first.startswith("# DBTITLE"):
            first = next((line.strip() for line in text.splitlines()[1:] if line.strip()), "")
        magic = _CELL_LANGUAGE.match(first)
        if magic is None or magic.group("magic") not in _OTHER_LANGUAGES:
            kept.append(text)
    return kept


def mentions_torch_distributor(source: SourceFile) -> bool:
    """Some code cell of the file holds the word ``TorchDistributor``."""
    return any(cell.code and WORD in cell.raw for cell in source.cells)


def uses_torch_distributor(source: SourceFile) -> bool:
    """Some code cell does more with ``TorchDistributor`` (or its DeepSpeed sibling) than import it: builds one,
    subclasses it, passes it on... A file that only imports it has nothing to migrate (its Spark code is no item of
    ours). A mention in a cell that cannot be read counts as a use."""
    mentioned = [cell for cell in source.cells if cell.code and WORD in cell.raw]
    aliases: Set[str] = set()
    for cell in mentioned:
        if cell.text is None or WORD not in cell.text:
            return True  # (a magic, or a cell in another language: its own report says so)
        tree = _parsed(cell.text)
        if tree is None:
            return True
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and WORD in node.id or isinstance(node, ast.Attribute) and WORD in node.attr:
                return True
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                aliases.update(alias.asname for alias in node.names if WORD in alias.name and alias.asname)
    if not aliases:
        return False
    pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, aliases))) + r")\b")
    for cell in source.cells:
        if cell.code and cell.text is not None and pattern.search(cell.text):
            tree = _parsed(cell.text)
            if tree is None or any(isinstance(node, ast.Name) and node.id in aliases for node in ast.walk(tree)):
                return True
    return False


def _parsed(text: str) -> Optional[ast.AST]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


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
        if WORD in cell.raw:
            findings.extend((cell.number, finding) for finding in _unread_mentions(cell.text, cell.masks, lines))
    python = [cell for cell in source.cells if cell.code and cell.text is not None]
    words = relevant_words([cell.text for cell in python])  # type: ignore[misc]
    pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, words))) + r")\b")
    wanted = frozenset(cell.number for cell in python if pattern.search(cell.text))  # type: ignore[arg-type]
    return FileScan(wanted, tuple(findings), {RESTARTS: tuple(restarts), RELEVANT: pattern})


def relevant_words(texts: Sequence[str]) -> Set[str]:
    """Every name a ``TorchDistributor`` rewrite of these cells can read or bind (a superset): the distributor
    classes and their import aliases, variables assigned a call of them, names given to them as the count, the
    functions their ``run`` is given, and the decorator's name and packages."""
    trees = []
    for text in texts:
        try:
            trees.append(ast.parse(text))
        except (SyntaxError, ValueError):
            continue  # not parsed by libcst either, so never surveyed
    words = set(_ALWAYS_RELEVANT)
    nodes = [node for tree in trees for node in ast.walk(tree)]
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _from_pyspark(node):
            words.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    for node in nodes:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _root(node.value) in words:
            words.update(target.id for target in node.targets if isinstance(target, ast.Name))
        if isinstance(node, ast.Call) and _root(node.func) in words:  # a count given by name: its bindings matter
            counts = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "num_processes")]
            words.update(count.id for count in counts if isinstance(count, ast.Name))
    for node in nodes:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _METHODS
            and _root(node.func.value) in words
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            words.add(node.args[0].id)
    return words


def _from_pyspark(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").split(".")[0] == "pyspark"
    return any(alias.name.split(".")[0] == "pyspark" for alias in node.names)  # type: ignore[attr-defined]


def _root(node: ast.expr) -> str:
    """The name an expression starts from: ``a`` for ``a.b(c).d``."""
    while isinstance(node, (ast.Attribute, ast.Call)):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else ""


def _unread_mentions(text: Optional[str], masks: Dict[str, str], lines: List[str]) -> Iterator[Finding]:
    """``TorchDistributor`` where no rule reads it (``AM215``): in a ``%%writefile`` cell or a magic line of Python
    (both blocking: the rest of the file cannot be migrated around them), or in a cell of another language."""
    if text is not None:
        for magic in masks.values():
            if WORD in magic:
                index = next(i for i, line in enumerate(lines, start=1) if magic in line)
                yield Finding(
                    code=WRITEFILE,
                    line=index,
                    column=lines[index - 1].index(magic) + 1,
                    message="this magic line uses TorchDistributor, which air-migrate cannot rewrite inside "
                    "a magic: write it as plain Python (without the magic), then run air-migrate again",
                    severity=Severity.BLOCKING,
                )
        return
    index, line = next(
        ((i, line) for i, line in enumerate(lines, start=1) if line.strip() and not line.startswith("# DBTITLE")),
        (1, ""),
    )
    language = _CELL_LANGUAGE.match(line.strip())
    column = len(line) - len(line.lstrip()) + 1
    if _WRITEFILE.match(line):
        yield Finding(
            code=WRITEFILE,
            line=index,
            column=_WRITEFILE.match(line).end("lead") + 1,  # type: ignore[union-attr]
            message="this %%writefile cell writes a script that uses TorchDistributor; scripts run with "
            "torchrun and have no decorator form, so air-migrate leaves it: move the training code into a "
            "function of this notebook decorated with @distributed(...), or migrate the script by hand",
            severity=Severity.BLOCKING,
        )
    elif language is not None and language.group("magic") in _OTHER_LANGUAGES:
        shown = re.sub(r"^# MAGIC[ \t]*", "", line.strip()).split()[0]
        yield Finding(
            code=WRITEFILE,
            line=index,
            column=column,
            message=f"this {shown} cell mentions TorchDistributor; air-migrate does not read other "
            "languages: check it by hand",
            severity=Severity.MANUAL,
        )
    else:
        yield Finding(
            code=WRITEFILE,
            line=index,
            column=column,
            message="this cell mentions TorchDistributor but air-migrate cannot read it (a magic over "
            "several lines?), and the rest of the notebook cannot be migrated around it: write it as plain "
            "Python, then run air-migrate again",
            severity=Severity.BLOCKING,
        )
