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
from typing import List, Pattern, Sequence, Set, Tuple

from air_migrate.rule_base import PrefixStatement
from air_migrate.todo_markers import PREFIX_BYTES

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
    if b"GPUType" in data or b"TorchDistributor" in data or PREFIX_BYTES in data:
        return True  # (a marker an earlier run left stays reported until it is deleted)
    if (b"gpu" in data and (b"gpus" in data or b"gpu_type" in data)) or b"accelerator_type" in data:
        return _KEYWORDS_BYTES.search(data) is not None
    return False


def mentions(text: str) -> bool:
    """The same check on a cell's text (the names bound by earlier cells aside)."""
    if any(word in text for word in TRIGGER_WORDS):
        return True
    return any(word in text for word in _KEYWORD_WORDS) and _KEYWORDS.search(text) is not None


@dataclasses.dataclass(frozen=True)
class PrefixImport:
    """An earlier cell's import statement, as put before a cell."""

    text: str
    """The statement, ending in a line end."""
    cell: int
    line: int
    """1-based line of the statement in its cell."""


def prefix_of(imports: Sequence[PrefixImport]) -> Tuple[str, Tuple[PrefixStatement, ...]]:
    """``imports`` as one text, and where each statement starts in it and came from."""
    statements: List[PrefixStatement] = []
    line = 1
    for found in imports:
        statements.append(PrefixStatement(line, found.cell, found.line))
        line += found.text.count("\n")
    return "".join(found.text for found in imports), tuple(statements)


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
        lines: List[str] = []
        for statement in tree.body:
            if not isinstance(statement, (ast.Import, ast.ImportFrom)):
                continue
            lines = lines or _LINE.findall(text)  # split once: ast.get_source_segment splits per call
            self._imports.append(_Import(cell, statement.lineno, _segment(lines, statement)))
            found |= self._bind(statement)
        if found:
            self._pattern = _words_pattern(self._bound)

    def imports(self, newline: str) -> List[PrefixImport]:
        """The earlier cells' imports, one statement each, in ``newline`` line endings (what goes before a cell).

        A statement written again in a later cell is given once, where it was written last: it binds the same names
        to the same objects, and the last binding of each name is the one that holds, as when the notebook runs top
        to bottom (a notebook that imports in many cells would otherwise give each cell a longer prefix)."""
        texts = [found.text.replace("\r\n", "\n").replace("\n", newline) + newline for found in self._imports]
        last = {text: index for index, text in enumerate(texts)}
        return [
            PrefixImport(text, found.cell, found.line)
            for index, (text, found) in enumerate(zip(texts, self._imports))
            if last[text] == index
        ]

    def prefix(self, newline: str) -> Tuple[str, Tuple[PrefixStatement, ...]]:
        """The earlier cells' imports as text (one statement a line, in ``newline``), and where each one came from."""
        return prefix_of(self.imports(newline))

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


# Lines as Python's tokenizer splits them (``\r\n``, ``\r`` or ``\n``; a form feed is no line end).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _segment(lines: List[str], node: ast.stmt) -> str:
    """The source of ``node`` (what :func:`ast.get_source_segment` gives), from the text's lines split once; the
    columns :mod:`ast` gives are offsets in UTF-8 bytes."""
    first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[operator]
    if first == last:
        return lines[first].encode("utf-8")[node.col_offset : node.end_col_offset].decode("utf-8")
    start = lines[first].encode("utf-8")[node.col_offset :].decode("utf-8")
    end = lines[last].encode("utf-8")[: node.end_col_offset].decode("utf-8")
    return start + "".join(lines[first + 1 : last]) + end


def _ours(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in _PACKAGES)


def _words_pattern(words: Set[str]) -> Pattern[str]:
    return re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, words))) + r")\b") if words else re.compile(r"(?!)")
