"""Reading YAML the way the Databricks CLI does (YAML 1.2 scalars), and writing it back.

Two differences from PyYAML's default, both so that a file means here what it means upstream (Go's YAML 1.2
decoder): only ``true``/``false`` are booleans (``yes``, ``no``, ``on``, ``off`` stay strings, so
``env_variables: {DEBUG: yes}`` is the string ``yes``), and numbers keep the text they were written with, so a
string field given ``1e-3`` or ``0.10`` reads as that text, as Go's decoder gives it.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class Int(int):
    """An integer that remembers how it was written."""

    source: str


class Float(float):
    """A float that remembers how it was written."""

    source: str


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's core schema for plain scalars."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper with the same scalars: numbers written as they were read (``1e-3`` stays ``1e-3``), ``yes`` plain,
    and text of several lines as a ``|`` block."""


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
    return loader.construct_scalar(node).lower() == "true"


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


def load(text: str) -> Any:
    """Parse one YAML document (``yaml.YAMLError`` when it is not YAML)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


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
