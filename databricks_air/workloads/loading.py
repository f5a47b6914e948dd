"""From a workload file and ``--override KEY=VALUE`` pairs to a validated :class:`Workload`.

The order is upstream's: read the file (at most 1 MiB), parse it, check each override's path against the schema,
apply the overrides in order (creating missing parents), then validate the whole document, so that an override
cannot smuggle in what the file could not hold (``compute.num_accelerators=0`` fails like the file would).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Sequence, Tuple

import yaml

from databricks.air.workloads import schema, yaml_values
from databricks.air.workloads.errors import InvalidArguments, WorkloadFileError
from databricks.air.workloads.workload import Workload

MAX_FILE_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Override:
    """One ``--override KEY=VALUE``: a dotted path and a value parsed as YAML (``8``, ``true``, ``[a, b]``)."""

    path: Tuple[str, ...]
    value: Any
    text: str


def parse_override(text: str) -> Override:
    """Split at the first ``=``, check the path against the schema, parse the value as YAML."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        hint = " (the workload file goes with -f FILE)" if text.endswith((".yaml", ".yml")) else ""
        raise InvalidArguments(f"--override takes KEY=VALUE, such as compute.num_accelerators=8, not {text!r}{hint}")
    path = tuple(part.strip() for part in key.strip().split("."))
    if any(not part for part in path):
        raise InvalidArguments(f"--override {text!r}: the key {key!r} has an empty part")
    schema.find(path)
    try:
        parsed = yaml_values.load(value) if value.strip() else ""
    except yaml.YAMLError as error:
        raise InvalidArguments(f"--override {text!r}: the value is not YAML ({_first_line(error)})") from None
    return Override(path, parsed, text)


def apply_overrides(document: Dict[str, Any], overrides: Sequence[Override]) -> List[str]:
    """Apply in order, in place; return one line per change, for stderr."""
    changes = []
    for override in overrides:
        node = document
        for depth, part in enumerate(override.path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(override.path[: depth + 1])
                raise InvalidArguments(f"--override {override.text!r}: {where} holds a value, not a mapping")
            node = child
        leaf = override.path[-1]
        before = node.get(leaf, "(unset)")
        node[leaf] = override.value
        changes.append(f"override {'.'.join(override.path)}: {_brief(before)} -> {_brief(override.value)}")
    return changes


def read_document(path: str) -> Any:
    """The parsed file (a :class:`WorkloadFileError` naming the file when it cannot be read or parsed)."""
    shown = path
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise WorkloadFileError(path=shown, problem=f"is {size} bytes; a workload file may be at most 1 MiB")
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        raise WorkloadFileError(path=shown, problem="no such file") from None
    except IsADirectoryError:
        raise WorkloadFileError(path=shown, problem="is a directory, not a workload file") from None
    except OSError as error:
        raise WorkloadFileError(path=shown, problem=f"cannot be read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise WorkloadFileError(path=shown, problem=f"is not UTF-8 text (byte {error.start})") from None
    if not text.strip():
        raise WorkloadFileError(path=shown, problem="is empty: a workload needs at least experiment_name, compute and command")
    try:
        return yaml_values.load(text)
    except yaml.YAMLError as error:
        raise WorkloadFileError(path=shown, problem=f"is not valid YAML: {_first_line(error)}") from None


def load(path: str, overrides: Sequence[str] = ()) -> Tuple[Workload, List[str]]:
    """The validated workload of a file with overrides; and the notes for stderr (changes, older spellings)."""
    parsed = [parse_override(text) for text in overrides]  # bad overrides fail before the file is read
    document = read_document(path)
    notes: List[str] = []
    if parsed:
        if not isinstance(document, dict):
            raise WorkloadFileError(path=path, problem="must hold a mapping of fields (experiment_name, compute, command, ...)")
        notes += apply_overrides(document, parsed)
    workload, spellings = schema.validate(document, os.path.dirname(os.path.abspath(path)))
    return workload, notes + spellings


def _first_line(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)


def _brief(value: Any) -> str:
    text = yaml_values.inline(value)
    return text if len(text) <= 60 else text[:57] + "..."
