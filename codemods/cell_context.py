"""What a notebook cell inherits from the cells before it, in order: their imports, and the words worth parsing for.

Each Python cell is parsed on its own (one bad cell must not stop the others), yet a name imported in cell 2 is used
in cell 5. So a cell is parsed with the module-level imports of the earlier cells put before its own text (as they
were read, so that ``serverless_gpu`` names resolve even after their own cell is migrated); those statements are
never visited nor changed (:mod:`air_migrate.cell_pass`).

A cell is parsed at all only when it mentions a trigger word: the old package, its keywords, ``GPUType``, or a name
an earlier cell bound by importing from ``serverless_gpu`` or ``databricks.air`` (an alias such as ``from
serverless_gpu.compute import GPUType as T`` makes ``T`` one). Imports are found with :mod:`ast`, which is several
times faster than libcst, since most cells only need to be looked through.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import List, Pattern, Set, Tuple

from air_migrate.rule_base import PrefixStatement

TRIGGER_WORDS = ("serverless_gpu", "serverless-gpu", "GPUType", "TorchDistributor")
"""A file (or cell) that holds none of these, nor an old keyword argument, has nothing a rule changes."""
_KEYWORD_WORDS = ("gpus", "gpu_type", "accelerator_type")
# The old keywords count only as keyword arguments: `num_gpus = 8` or `--gpus` in ML code are no reason to parse.
# So does the new type keyword given a plain name (`accelerator_type=GPU_TYPE`): the name may still hold an old
# model name ("H100"), which AM103 reports on every run until it is fixed.
_KEYWORDS = re.compile(r"\b(?:gpus|gpu_type)\s*=(?!=)|\baccelerator_type\s*=\s*(?!AcceleratorType\b)[A-Za-z_]")
_KEYWORDS_BYTES = re.compile(_KEYWORDS.pattern.encode())
# pip names are case-insensitive: `%pip install Serverless-GPU` is worth a look too.
_ANY_CASE_BYTES = re.compile(rb"serverless[-_.]gpu", re.IGNORECASE)
_PACKAGES = ("serverless_gpu", "databricks.air")


def mentions_any(data: bytes) -> bool:
    """The cheap check on a file's bytes, before anything is decoded or parsed.

    Plain substring tests come first, so a file with nothing to migrate costs a few scans of its bytes; the
    regular expressions only run on files that hold one of their literal words.
    """
    if b"erverless" in data and _ANY_CASE_BYTES.search(data):  # also `Serverless-GPU` on a pip line
        return True
    if b"GPUType" in data or b"TorchDistributor" in data:
        return True
    if (b"gpu" in data and (b"gpus" in data or b"gpu_type" in data)) or b"accelerator_type" in data:
        return _KEYWORDS_BYTES.search(data) is not None
    return False


def mentions(text: str) -> bool:
    """The same check on a cell's text (the names bound by earlier cells aside)."""
    if any(word in text for word in TRIGGER_WORDS):
        return True
    return any(word in text for word in _KEYWORD_WORDS) and _KEYWORDS.search(text) is not None


@dataclasses.dataclass(frozen=True)
class _Import:
    cell: int
    line: int
    """1-based line of the statement in its cell."""
    text: str


class ImportContext:
    """The imports and trigger words gathered from the cells seen so far."""

    def __init__(self) -> None:
        self._imports: List[_Import] = []
        self._bound: Set[str] = set()
        self._pattern: Pattern[str] = _words_pattern(self._bound)

    def mentions(self, text: str) -> bool:
        """The cell's text holds a trigger word, so its Python is worth parsing."""
        return mentions(text) or bool(self._bound and self._pattern.search(text))

    def add(self, cell: int, text: str) -> None:
        """Take in the module-level imports of a cell's (masked) Python text."""
        if "import" not in text:
            return
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return  # a cell that does not parse imports nothing the next cells can rely on
        found = False
        for statement in tree.body:
            if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                continue
            segment = ast.get_source_segment(text, statement)
            if segment is None:
                continue
            self._imports.append(_Import(cell, statement.lineno, segment))
            found |= self._bind(statement)
        if found:
            self._pattern = _words_pattern(self._bound)

    def prefix(self, newline: str) -> Tuple[str, Tuple[PrefixStatement, ...]]:
        """The earlier cells' imports as text (one statement a line, in ``newline``), and where each one came from."""
        pieces: List[str] = []
        statements: List[PrefixStatement] = []
        line = 1
        for found in self._imports:
            text = found.text.replace("\r\n", "\n").replace("\n", newline) + newline
            statements.append(PrefixStatement(line, found.cell, found.line))
            pieces.append(text)
            line += text.count("\n")
        return "".join(pieces), tuple(statements)

    def _bind(self, statement: ast.stmt) -> bool:
        """Remember the names an import of either package binds; True when there are new ones."""
        before = len(self._bound)
        if isinstance(statement, ast.ImportFrom) and not statement.level and _ours(statement.module or ""):
            self._bound.update(alias.asname or alias.name for alias in statement.names if alias.name != "*")
        elif isinstance(statement, ast.Import):
            self._bound.update(
                (alias.asname or alias.name).split(".")[0] for alias in statement.names if _ours(alias.name)
            )
        return len(self._bound) != before


def _ours(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in _PACKAGES)


def _words_pattern(words: Set[str]) -> Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, words))) + r")\b") if words else re.compile(r"(?!)")
