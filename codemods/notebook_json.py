"""A Jupyter notebook's JSON, read so that it can be written again byte for byte, or refused.

:class:`JsonStyle` is how the file was written (indent, ``ensure_ascii``, final newline; key order is the document's
own). A notebook is taken only when writing what was read in that style gives its bytes back exactly, so a rewrite
changes nothing but the sources of the cells it changes.

Some exported notebooks (Databricks' among them) hold an object with a key given twice. Every JSON reader (Python's
:mod:`json`, nbformat, Jupyter, Databricks) keeps the last value, so that is what the notebook means, and what is
migrated; the earlier value, which no reader sees, is kept where it was, as it was (:class:`DuplicateKeys`), so the
file is written back faithfully rather than refused or silently shortened.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Dict, List, Optional, Tuple


class NotebookJsonError(Exception):
    """The bytes are not JSON, or JSON whose layout cannot be written again exactly."""


class DuplicateKeys(Dict[str, Any]):
    """A JSON object that gives a key more than once: as a mapping it holds each key's last value (what JSON readers
    keep); :meth:`items`, which :func:`json.dumps` writes from, gives every pair in the order read, the current value
    in the last pair of each key and the earlier ones as they were."""

    def __init__(self, pairs: List[Tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def items(self) -> List[Tuple[str, Any]]:  # type: ignore[override]
        last = {key: index for index, (key, _) in enumerate(self._pairs)}
        pairs = [
            (key, self[key] if last[key] == index else value)
            for index, (key, value) in enumerate(self._pairs)
            if key in self
        ]
        return pairs + [(key, value) for key, value in super().items() if key not in last]


def _object(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    if len({key for key, _ in pairs}) == len(pairs):
        return dict(pairs)
    return DuplicateKeys(pairs)


@dataclasses.dataclass(frozen=True)
class JsonStyle:
    """How a notebook's JSON was written, so that it can be written again the same way."""

    indent: Optional[int]
    ensure_ascii: bool
    trailing_newline: bool

    @classmethod
    def detect(cls, raw: str) -> "JsonStyle":
        match = re.search(r"\n( +)\S", raw)
        indent = len(match.group(1)) if match else None
        ensure_ascii = bool(re.search(r"\\u[0-9a-fA-F]{4}", raw)) and all(ord(c) < 128 for c in raw)
        return cls(indent=indent, ensure_ascii=ensure_ascii, trailing_newline=raw.endswith("\n"))

    def dump(self, document: Any) -> bytes:
        separators = (",", ": ") if self.indent is not None else (", ", ": ")
        text = json.dumps(document, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=separators)
        return (text + ("\n" if self.trailing_newline else "")).encode("utf-8")


@dataclasses.dataclass(frozen=True)
class NotebookJson:
    """A notebook's JSON text that :meth:`dump` writes back exactly; :meth:`load` gives a fresh document to change."""

    text: str
    style: JsonStyle
    duplicates: bool
    """Some object gives a key twice (read with :class:`DuplicateKeys`)."""

    @classmethod
    def read(cls, data: bytes) -> Tuple["NotebookJson", Any]:
        """The notebook's JSON and its document, or :class:`NotebookJsonError` saying what is wrong and what to do."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise NotebookJsonError(
                f"not UTF-8 ({error.reason} at byte {error.start}), as a notebook's JSON must be"
            ) from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise NotebookJsonError(
                f"not a notebook: invalid JSON at line {error.lineno}, column {error.colno}"
            ) from None
        style = JsonStyle.detect(text)
        written = style.dump(document)
        if written == data:
            return cls(text, style, duplicates=False), document
        document = json.loads(text, object_pairs_hook=_object)  # (only now: the hook costs a call per object)
        rewritten = style.dump(document)
        if rewritten == data:
            return cls(text, style, duplicates=True), document
        line, column = _position(data, rewritten)
        raise NotebookJsonError(
            f"its JSON layout cannot be reproduced exactly (it differs from how it would be written again at line "
            f"{line}, column {column}), so it is left as it is: save it once with Jupyter or `jupyter nbconvert "
            "--to notebook --inplace`, then run air-migrate again"
        )

    def load(self) -> Any:
        """A new copy of the document, to change and :meth:`dump`."""
        return json.loads(self.text, object_pairs_hook=_object) if self.duplicates else json.loads(self.text)

    def dump(self, document: Any) -> bytes:
        """``document`` written in the notebook's own style."""
        return self.style.dump(document)


def _position(data: bytes, other: bytes) -> Tuple[int, int]:
    """The 1-based line and column (in characters) in ``data`` of the first byte where ``other`` differs."""
    offset = next((index for index, (a, b) in enumerate(zip(data, other)) if a != b), min(len(data), len(other)))
    before = data[:offset].decode("utf-8", errors="ignore")
    return before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
