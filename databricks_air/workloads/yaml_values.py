"""Reading YAML the way the Databricks CLI does (YAML 1.2 scalars), and writing it back.

Two differences from PyYAML's default, both so that a file means here what it means upstream (Go's YAML 1.2
decoder): only ``true``/``false`` are booleans (``yes``, ``no``, ``on``, ``off`` stay strings, so
``env_variables: {DEBUG: yes}`` is the string ``yes``), and numbers keep the text they were written with, so a
string field given ``1e-3`` or ``0.10`` reads as that text, as Go's decoder gives it.

The reader also refuses, while it builds the document (before any value exists), what a workload file has no use
for and what would make the document too big or too deep for the code that reads it later (:class:`Refused`, which
names the field): anchors and aliases (``&base``, ``*base``: a "billion laughs" file grows to gigabytes, a
self-referencing alias never ends), a key given twice in one mapping (PyYAML would keep the last one silently),
nesting deeper than :data:`MAX_DEPTH`, an integer of more than :data:`MAX_INTEGER_DIGITS` digits, and tags other
than YAML's core ones (``!!binary``, ``!!timestamp``, ``!!set``...).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode

from databricks.air._rebuildable import RebuildableError

MAX_DEPTH = 64
"""Levels of lists and mappings a document may have, the file's own mapping being level 1 (``parameters: {a: 1}``
is 2 levels)."""
MAX_INTEGER_DIGITS = 100
"""Digits an integer may have (Python refuses to turn more than 4300 into text; Go's decoder takes 64 bits)."""

_CORE = "tag:yaml.org,2002:"
_CORE_TAGS = {f"{_CORE}{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map")} | {"!"}

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class Int(int):
    """An integer that remembers how it was written."""

    source: str


class Float(float):
    """A float that remembers how it was written."""

    source: str


class Refused(RebuildableError, ComposerError):
    """YAML that a workload file may not hold (an alias, a repeated key, deep nesting...).

    Attributes:
        field: the dotted path of the value (``parameters.lr``, ``environment.dependencies[2]``); ``""`` for the
            document itself.
        reason: what is wrong and what to do, with the line.
    """

    def __init__(self, field: str, reason: str = "", mark: Any = None) -> None:
        # The message alone (see RebuildableError) is the reason: a DataLoader worker's re-raise passes only it.
        super().__init__(None, None, reason or field, mark)
        self.field = field
        self.reason = reason
        self.mark = mark


_Step = Union[str, int, None]


def key_text(key: str) -> str:
    """A key as a field's path shows it: as written, or quoted when it holds a space or a character not printable."""
    return key if key and key.isprintable() and " " not in key else repr(key)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's core schema for plain scalars, that refuses what :class:`Refused` describes."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._path: List[_Step] = []

    def compose_node(self, parent: Optional[Node], index: Any) -> Optional[Node]:
        """One node, with the checks above made on its event (before its children are read)."""
        if isinstance(index, ScalarNode):
            step: _Step = index.value
        elif isinstance(index, int):
            step = index
        else:
            step = None  # the document, a mapping's key, or the value of a key that is no scalar
        self._path.append(step)
        try:
            event = self.peek_event()
            line = event.start_mark.line + 1
            if self.check_event(AliasEvent):
                raise Refused(
                    self._field(),
                    f"uses the YAML alias *{event.anchor} (line {line}): anchors and aliases "
                    "are not supported in a workload file; write the value out in full",
                    event.start_mark,
                )
            if event.anchor is not None:
                raise Refused(
                    self._field(),
                    f"has the YAML anchor &{event.anchor} (line {line}): anchors and "
                    "aliases are not supported in a workload file; write the value out in full",
                    event.start_mark,
                )
            tag = getattr(event, "tag", None)
            if tag is not None and tag not in _CORE_TAGS:
                shown = "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag
                raise Refused(
                    self._field(),
                    f"has the YAML tag {shown} (line {line}): a workload file holds only "
                    "strings, numbers, booleans, lists and mappings; remove the tag",
                    event.start_mark,
                )
            if len(self._path) > MAX_DEPTH and self.check_event(SequenceStartEvent, MappingStartEvent):
                top = next((part for part in self._path[1:] if isinstance(part, str)), "")
                raise Refused(
                    top,
                    f"is nested more than {MAX_DEPTH} levels deep (line {line}): a workload file "
                    "holds settings, not data; flatten it, or put the data in a file of code_source",
                    event.start_mark,
                )
            node = super().compose_node(parent, index)
            if isinstance(node, ScalarNode) and node.tag == f"{_CORE}int":
                self._check_integer(node)
            elif isinstance(node, MappingNode):
                self._check_keys(node)
            return node
        finally:
            self._path.pop()

    def _field(self, *more: _Step) -> str:
        text = ""
        for part in [*self._path[1:], *more]:
            if isinstance(part, int):
                text += f"[{part}]"
            elif part is not None:
                text += f".{key_text(part)}" if text else key_text(part)
        return text

    def _check_integer(self, node: ScalarNode) -> None:
        digits = len(node.value.lstrip("+-").removeprefix("0x").removeprefix("0o"))
        if digits > MAX_INTEGER_DIGITS:
            raise Refused(
                self._field(),
                f"is an integer of {digits} digits (line {node.start_mark.line + 1}): at most "
                f"{MAX_INTEGER_DIGITS} are allowed; quote it if it is text",
                node.start_mark,
            )

    def _check_keys(self, node: MappingNode) -> None:
        seen: Dict[Tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode):
                continue
            line = key.start_mark.line + 1
            first = seen.get((key.tag, key.value))
            if first is not None:
                lines = f"lines {first} and {line}" if first != line else f"line {line}"
                raise Refused(
                    self._field(key.value),
                    f"is given twice ({lines}): keep one of them (YAML would silently keep the last)",
                    key.start_mark,
                )
            seen[(key.tag, key.value)] = line


class _Dumper(yaml.SafeDumper):
    """SafeDumper with the same scalars: numbers written as they were read (``1e-3`` stays ``1e-3``), ``yes`` plain,
    and text of several lines as a ``|`` block; never an anchor (which :class:`_Loader` would refuse to read back),
    even where one value appears twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Loader.yaml_implicit_resolvers = {}
_Dumper.yaml_implicit_resolvers = {}
for _tag, _regex, _first in [
    ("tag:yaml.org,2002:bool", _BOOL, list("tTfF")),
    ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", _INT, list("-+0123456789")),
    ("tag:yaml.org,2002:float", _FLOAT, list("-+.0123456789")),
    ("tag:yaml.org,2002:merge", re.compile(r"^<<$"), ["<"]),  # merge keys, which Go's decoder also takes
]:
    _Loader.add_implicit_resolver(_tag, _regex, _first)
    _Dumper.add_implicit_resolver(_tag, _regex, _first)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Int:
    text = loader.construct_scalar(node)
    if not _INT.match(text):  # only with an explicit tag: !!int abc
        raise ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark)
    if text.startswith("0o"):
        value = Int(int(text[2:], 8))
    elif text.startswith("0x"):
        value = Int(int(text[2:], 16))
    else:
        value = Int(int(text))
    value.source = text
    return value


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Float:
    text = loader.construct_scalar(node)
    if not _FLOAT.match(text) and not _INT.match(text):  # only with an explicit tag: !!float abc
        raise ConstructorError(None, None, f"{text!r} is not a number", node.start_mark)
    lowered = text.lower()
    if lowered.endswith(".inf"):
        number = float("-inf") if lowered.startswith("-") else float("inf")
    elif lowered == ".nan":
        number = float("nan")
    else:
        number = float(text)
    value = Float(number)
    value.source = text
    return value


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> bool:
    text = loader.construct_scalar(node)
    if not _BOOL.match(text):  # only with an explicit tag: !!bool maybe
        raise ConstructorError(None, None, f"{text!r} is not true or false", node.start_mark)
    return text.lower() == "true"


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


def load(text: str) -> Any:
    """Parse one YAML document (``yaml.YAMLError`` when it is not YAML, :class:`Refused` for what is refused)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass


def scalar_text(value: Any) -> str:
    """A scalar as the text a string field would hold: numbers as written, booleans as ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    source = getattr(value, "source", None)
    return source if source is not None else str(value)


def plain(value: Any) -> Any:
    """The same data with only built-in types (for ``yaml.safe_dump`` and ``json``)."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _represent_text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_str(value)


_Dumper.add_representer(str, _represent_text)
_Dumper.add_representer(Int, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:int", value.source))
_Dumper.add_representer(Float, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:float", value.source))


def dump(document: Any) -> str:
    """YAML text for a document, keys in their order, numbers as written."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


def inline(value: Any) -> str:
    """One line of YAML for a value (``[1, 2]``, ``{a: 1}``, ``4``), for messages."""
    if not isinstance(value, (dict, list)):
        return scalar_text(value) if value is not None else "null"
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, sort_keys=False, width=1 << 30)
    return text.strip().removesuffix("...").strip()
