"""The three kinds of file ``air-migrate`` reads, split into cells of Python, and put back together byte for byte.

* a plain Python file is one cell;
* a Databricks notebook source (``.py`` whose first line is ``# Databricks notebook source``) is split on its
  ``# COMMAND ----------`` lines; cells whose lines all start with ``# MAGIC`` (other languages, ``%pip``...) are
  kept as they are; a Python cell that holds bare magic lines (``%pip install x`` without ``# MAGIC``) and does
  not parse as it is has them masked, as a Jupyter notebook's;
* a Jupyter notebook (``.ipynb``) gives its code cells, with IPython magics masked by placeholders that are
  valid Python (``%pip install x`` becomes a name, ``x = !ls`` keeps its ``x =``), so that libcst can parse them.
  A placeholder is as long as its magic whenever the magic is long enough to hold a unique one, so positions on
  the line stay those of the input (a magic runs to the end of its line, so nothing after it can shift anyway).

Everything outside the Python text of a cell a transform changes comes back byte for byte: BOM, CRLF, tabs, a
missing final newline, the encoding a script declares in a PEP 263 coding line (``# -*- coding: latin-1 -*-``),
separators, ``# MAGIC`` and ``# DBTITLE`` lines, and the notebook's JSON style (indent, key order, ``ensure_ascii``,
trailing newline, sources as lists of lines or strings, a key given twice: :mod:`air_migrate.notebook_json`). A
notebook whose JSON style cannot be reproduced exactly is refused rather than reformatted.
"""

from __future__ import annotations

import abc
import ast
import codecs
import dataclasses
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from air_migrate.notebook_json import NotebookJson, NotebookJsonError

BOM = "\ufeff"
DATABRICKS_HEADER = "# Databricks notebook source"
DATABRICKS_SEPARATOR = "# COMMAND ----------"
_MAGIC_PREFIX = "# MAGIC"
_TITLE_PREFIX = "# DBTITLE"
# Cell magics whose body is Python, so it can be migrated (the black/nbQA convention).
PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture")
_LINE_MAGIC = re.compile(r"^(?P<indent>[ \t]*)(?P<magic>[%!].*)$")
_ASSIGNED_MAGIC = re.compile(r"^(?P<head>[ \t]*[A-Za-z_][\w.]*\s*=\s*)(?P<magic>[%!].*)$")


class SourceError(Exception):
    """A file that cannot be read as what it claims to be (not UTF-8, broken JSON...), or whose migrated text cannot
    be written in its own encoding."""


@dataclasses.dataclass
class Cell:
    """One cell of a file, as a transform sees it."""

    number: int
    """1-based, counting every cell of the file (markdown included), as editors and ruff do."""
    first_line: int
    """1-based line of the file where this cell's text starts (1 for a notebook's cells)."""
    text: Optional[str]
    """The Python text to transform (magics masked), or ``None`` when the cell is not Python."""
    skip_reason: Optional[str] = None
    """Why a code cell is not offered to transforms (a cell magic, a multi-line magic...)."""
    masks: Dict[str, str] = dataclasses.field(default_factory=dict)
    """Placeholder -> the magic text it stands for."""
    raw: str = ""
    """The cell as written (magics and ``# MAGIC`` lines included)."""
    code: bool = True
    """False for markdown and raw cells (and a notebook in another language): no rule looks at them."""
    shell: bool = False
    """A shell cell (Databricks ``%sh``, Jupyter ``%%sh``, ``%%bash``, ``%%script sh|bash``): its lines are commands."""

    def unmask(self, text: str) -> str:
        """Put the magics back into ``text``."""
        for placeholder, magic in self.masks.items():
            text = text.replace(placeholder, magic)
        return text


class SourceFile(abc.ABC):
    """A file split into cells; :meth:`render` puts it back with some cells' Python replaced."""

    kind: str
    encoding: str = "utf-8"
    """The encoding of the file's bytes (a script's coding line may name another; a notebook's JSON is UTF-8)."""

    def __init__(self, cells: List[Cell]) -> None:
        self.cells = cells

    @abc.abstractmethod
    def render(self, new_texts: Dict[int, str]) -> bytes:
        """The file's bytes, with the cells numbered in ``new_texts`` given new text (as written: magics unmasked)."""


class PythonFile(SourceFile):
    """A plain module: one cell, the whole text."""

    kind = "python"

    def __init__(self, text: str, bom: bool, encoding: str = "utf-8") -> None:
        super().__init__([Cell(number=1, first_line=1, text=text, raw=text)])
        self._text = text
        self._bom = bom
        self.encoding = encoding

    def render(self, new_texts: Dict[int, str]) -> bytes:
        text = new_texts.get(1, self._text)
        return _encode((BOM if self._bom else "") + text, self.encoding)


class DatabricksFile(SourceFile):
    """A Databricks notebook source: a header line, then cells between separator lines."""

    kind = "databricks"

    def __init__(
        self, header: str, chunks: List[str], separators: List[str], bom: bool, encoding: str = "utf-8"
    ) -> None:
        cells = []
        line = 1 + header.count("\n")
        for number, chunk in enumerate(chunks, start=1):
            python = not _is_magic_chunk(chunk)
            masked = _masked_python_chunk(number, chunk) if python else None
            cells.append(
                Cell(
                    number=number,
                    first_line=line,
                    text=chunk if python else None,
                    raw=chunk,
                    code=python or not _is_markdown_chunk(chunk),
                    shell=not python and _is_shell_chunk(chunk),
                )
                if masked is None
                else dataclasses.replace(masked, first_line=line, raw=chunk)
            )
            line += chunk.count("\n") + (separators[number - 1].count("\n") if number <= len(separators) else 0)
        super().__init__(cells)
        self._header = header
        self._chunks = chunks
        self._separators = separators
        self._bom = bom
        self.encoding = encoding

    def render(self, new_texts: Dict[int, str]) -> bytes:
        pieces = [BOM if self._bom else "", self._header]
        for number, chunk in enumerate(self._chunks, start=1):
            pieces.append(new_texts.get(number, chunk))
            if number <= len(self._separators):
                pieces.append(self._separators[number - 1])
        return _encode("".join(pieces), self.encoding)


def _encode(text: str, encoding: str) -> bytes:
    try:
        return text.encode(encoding)
    except UnicodeEncodeError as error:
        raise SourceError(
            f"the migrated text cannot be written in {encoding}, the encoding its coding line declares: it would "
            f"hold {error.object[error.start : error.end]!r}; declare utf-8 instead and run air-migrate again"
        ) from None


_MAGIC_LINE = re.compile(r"^[ \t]*(?:[A-Za-z_][\w.]*\s*=\s*)?[%!]", re.MULTILINE)


def _masked_python_chunk(number: int, chunk: str) -> Optional[Cell]:
    """A Python cell of a Databricks source that holds bare magic lines (``%pip install x``, ``!nvidia-smi``, ``x =
    !ls``) and does not parse as it is, with them masked as a Jupyter notebook's are; ``None`` for any other cell
    (one that parses holds such a line only in a string: it is Python as it is)."""
    if not _MAGIC_LINE.search(chunk):
        return None
    try:
        ast.parse(chunk)
        return None
    except (SyntaxError, ValueError):
        pass
    cell = mask_cell(number, chunk)
    return cell if cell.text is not None and cell.masks else None


def _magic_lines(chunk: str) -> List[str]:
    lines = [line for line in chunk.splitlines() if line.strip()]
    if lines and lines[0].startswith(_TITLE_PREFIX):
        lines = lines[1:]
    return lines


def _is_magic_chunk(chunk: str) -> bool:
    """All of the cell's non-blank lines are ``# MAGIC`` (after an optional ``# DBTITLE``) lines."""
    lines = _magic_lines(chunk)
    return bool(lines) and all(line.startswith(_MAGIC_PREFIX) for line in lines)


def _magic_command(chunk: str) -> str:
    """The magic a ``# MAGIC`` cell starts with (``%md``, ``%sh``...)."""
    first = _magic_lines(chunk)[0][len(_MAGIC_PREFIX) :].strip()
    return first.split(None, 1)[0] if first else ""


def _is_markdown_chunk(chunk: str) -> bool:
    """A ``# MAGIC %md`` cell: documentation, where a ``%pip`` line is only an example."""
    return _magic_command(chunk) in ("%md", "%md-sandbox")


def _is_shell_chunk(chunk: str) -> bool:
    """A ``# MAGIC %sh`` cell: every line is a shell command."""
    return _magic_command(chunk) == "%sh"


def is_shell_cell_magic(first_line: str) -> bool:
    """``%%sh``, ``%%bash``, ``%%script sh`` or ``%%script bash``: a notebook cell of shell commands."""
    words = first_line.split()
    if not words:
        return False
    if words[0] == "%%script":
        return len(words) > 1 and os.path.basename(words[1]) in ("sh", "bash")
    return words[0] in ("%%sh", "%%bash")


class NotebookFile(SourceFile):
    """A Jupyter notebook: code cells of a Python notebook, magics masked."""

    kind = "ipynb"

    def __init__(self, document: Dict[str, Any], notebook_json: NotebookJson) -> None:
        self._json = notebook_json
        python = _is_python_notebook(document)
        cells = []
        for number, raw in enumerate(document.get("cells", []), start=1):
            text = _source_text(raw.get("source", ""))
            if raw.get("cell_type") != "code" or not python:
                cells.append(Cell(number=number, first_line=1, text=None, raw=text, code=False))
                continue
            first = text.splitlines()[0] if text.strip() else ""
            cells.append(dataclasses.replace(mask_cell(number, text), raw=text, shell=is_shell_cell_magic(first)))
        super().__init__(cells)

    def render(self, new_texts: Dict[int, str]) -> bytes:
        document = self._json.load()  # a fresh copy, duplicate keys and all
        for number, text in new_texts.items():
            raw = document["cells"][number - 1]
            raw["source"] = text.splitlines(keepends=True) if isinstance(raw.get("source"), list) else text
        return self._json.dump(document)


def _is_python_notebook(document: Dict[str, Any]) -> bool:
    metadata = document.get("metadata", {})
    language = metadata.get("language_info", {}).get("name") or metadata.get("kernelspec", {}).get("language")
    return language is None or str(language).lower() == "python"


def _source_text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def mask_cell(number: int, source: str) -> Cell:
    """A notebook code cell with its IPython magics replaced by unique placeholders that are valid Python."""
    lines = source.splitlines(keepends=True)
    masks: Dict[str, str] = {}
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        if not first.startswith(PYTHON_CELL_MAGICS):
            name = first.split()[0]
            return Cell(number, 1, None, skip_reason=f"the cell magic {name} does not hold Python")
    masked_lines: List[str] = []
    for index, line in enumerate(lines):
        body, ending = _split_ending(line)
        if index == 0 and body.strip().startswith("%%"):
            placeholder = _placeholder(source, masks, "#", len(body))
            masks[placeholder] = body
            masked_lines.append(placeholder + ending)
            continue
        assigned = _ASSIGNED_MAGIC.match(body)
        plain = _LINE_MAGIC.match(body) if assigned is None else None
        match = assigned or plain
        if match is None:
            masked_lines.append(line)
            continue
        if body.rstrip().endswith("\\"):
            return Cell(number, 1, None, skip_reason="a magic continues over several lines")
        prefix = match.group("head") if assigned else match.group("indent")
        placeholder = _placeholder(source, masks, "", len(match.group("magic")))
        masks[placeholder] = match.group("magic")
        masked_lines.append(prefix + placeholder + ending)
    masked = "".join(masked_lines)
    cell = Cell(number, 1, masked, masks=masks)
    if cell.unmask(masked) != source:
        return Cell(number, 1, None, skip_reason="its magics could not be masked and restored exactly")
    return cell


def _split_ending(line: str) -> Tuple[str, str]:
    stripped = line.rstrip("\r\n")
    return stripped, line[len(stripped) :]


def _placeholder(source: str, masks: Dict[str, str], prefix: str, length: int) -> str:
    """A name (or comment) unique in the cell, as long as the magic it stands for when that is long enough."""
    index = len(masks)
    while True:
        base = f"{prefix}__air_magic_{index}_"
        name = base + "_" * max(1, length - len(base))
        if name not in source and name not in masks:
            return name
        index += 1


def is_notebook(name: str, data: bytes) -> bool:
    """A Jupyter notebook: named ``.ipynb``, or not named ``.py`` and holding JSON with a list of cells."""
    if name.endswith(".ipynb"):
        return True
    if name.endswith(".py") or data.lstrip()[:1] != b"{":
        return False
    try:
        document = json.loads(data)
    except ValueError:
        return False
    return isinstance(document, dict) and isinstance(document.get("cells"), list)


def read_source(path: str, data: bytes) -> SourceFile:
    """Split ``data`` (the bytes of ``path``) into cells according to its kind."""
    if path.endswith(".ipynb"):
        return _read_notebook(data)
    text, encoding = _decode_script(data)
    bom = text.startswith(BOM)
    if bom:
        text = text[1:]
    first, _, _ = text.partition("\n")
    if first.rstrip("\r") == DATABRICKS_HEADER:
        return _split_databricks(text, bom, encoding)
    return PythonFile(text, bom, encoding)


# PEP 263: a comment on line 1 or 2 that names the encoding (`# -*- coding: latin-1 -*-`, `# vim: fileencoding=cp1252`).
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")
_ASCII_PROBE = b"# -*- coding: x -*-\n"  # what an encoding must read as itself to be declared (not UTF-16)


def coding_line(data: bytes) -> Optional[str]:
    """The encoding a script's coding line names (PEP 263: on line 1, or on line 2 after a comment or blank line
    1), as written; ``None`` when there is none."""
    lines = data[len(codecs.BOM_UTF8) :].split(b"\n", 2) if data.startswith(codecs.BOM_UTF8) else data.split(b"\n", 2)
    for index, line in enumerate(lines[:2]):
        found = _CODING.match(line)
        if found is not None:
            return found.group(1).decode("ascii")
        if index == 0 and not _BLANK_OR_COMMENT.match(line):
            return None  # Python looks at line 2 only after a comment or a blank line
    return None


def _decode_script(data: bytes) -> Tuple[str, str]:
    """The text of a script and the encoding it is in: UTF-8, or what its coding line declares."""
    declared = coding_line(data)
    encoding = "utf-8"
    if declared is not None:
        try:
            encoding = codecs.lookup(declared).name
        except LookupError:
            raise SourceError(
                f"its coding line declares {declared!r}, which is no encoding Python knows: correct "
                "it (e.g. `# -*- coding: latin-1 -*-`)"
            ) from None
        if encoding == "utf-8-sig":
            encoding = "utf-8"
        if _ASCII_PROBE.decode(encoding, errors="replace").encode("ascii", errors="replace") != _ASCII_PROBE:
            raise SourceError(
                f"its coding line declares {declared!r}, which Python refuses in a coding line (the "
                "line itself must read as ASCII): save the file as UTF-8 and remove the line"
            )
        if data.startswith(codecs.BOM_UTF8) and encoding != "utf-8":
            raise SourceError(
                f"it starts with a UTF-8 byte order mark but its coding line declares {declared!r}, "
                "which Python refuses: remove one of them"
            )
    try:
        return data.decode(encoding), encoding
    except UnicodeDecodeError as error:
        if declared is None:
            raise SourceError(
                f"not UTF-8 ({error.reason} at byte {error.start}); if it is in another encoding, declare it on "
                "its first or second line, e.g. `# -*- coding: latin-1 -*-` (PEP 263)"
            ) from None
        raise SourceError(
            f"not valid {declared}, the encoding its coding line declares ({error.reason} at byte "
            f"{error.start}): declare the encoding the file is really in, or save it in {declared}"
        ) from None


def _read_notebook(data: bytes) -> "NotebookFile":
    try:
        notebook_json, document = NotebookJson.read(data)
    except NotebookJsonError as error:
        raise SourceError(str(error)) from None
    if not isinstance(document, dict) or not isinstance(document.get("cells", []), list):
        raise SourceError("not a notebook: no list of cells")
    return NotebookFile(document, notebook_json)


def _split_databricks(text: str, bom: bool, encoding: str = "utf-8") -> DatabricksFile:
    lines = text.splitlines(keepends=True)
    header, rest = lines[0], lines[1:]
    chunks: List[str] = []
    separators: List[str] = []
    current: List[str] = []
    for line in rest:
        if line.rstrip("\r\n") == DATABRICKS_SEPARATOR:
            chunks.append("".join(current))
            separators.append(line)
            current = []
        else:
            current.append(line)
    chunks.append("".join(current))
    return DatabricksFile(header, chunks, separators, bom, encoding)
