"""From a workload file and ``--override KEY=VALUE`` pairs to a validated :class:`Workload`.

The order is upstream's: read the file (at most 1 MiB), parse it, check each override's path against the schema,
apply the overrides in order (creating missing parents), then validate the whole document, so that an override
cannot smuggle in what the file could not hold (``compute.num_accelerators=0`` fails like the file would). Last,
what the code snapshot will copy is looked over (:func:`.snapshot.survey`): a missing include path, a git pin that
names no commit, an unreadable file fail here, before anything is recorded.

This is the one reader of workload files: whatever ``air run`` does with a file, it reads it through
:func:`read_document`, which takes only a regular file (a FIFO would block, ``/dev/zero`` never ends), reads at most
1 MiB and one byte more, and parses it with :mod:`.yaml_values`' loader.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from typing import Any, Dict, List, Sequence, Tuple

import yaml

from databricks.air.workloads import schema, snapshot, yaml_values
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
    except yaml_values.Refused as error:
        raise InvalidArguments(f"--override {text!r}: {error.field or 'the value'} {error.reason}") from None
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


def _read_file(path: str, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes (a :class:`WorkloadFileError` otherwise).

    The file is opened without blocking (a FIFO would wait for a writer forever) and checked on the open descriptor,
    so that what is read is what was checked; at most ``limit + 1`` bytes are read (``/dev/zero`` never ends, and a
    file may grow after it was looked at).
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise WorkloadFileError(path=path, problem="no such file") from None
    except IsADirectoryError:
        raise WorkloadFileError(path=path, problem="is a directory, not a workload file") from None
    except OSError as error:
        raise WorkloadFileError(path=path, problem=f"cannot be read: {error.strerror or error}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise WorkloadFileError(path=path, problem="is a directory, not a workload file")
        if not stat.S_ISREG(mode):
            kind = snapshot.special_kind(mode)
            raise WorkloadFileError(
                path=path, problem=f"is {kind}, not a regular file: write the workload to a file and give its path"
            )
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(descriptor, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise WorkloadFileError(path=path, problem=f"cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if size > limit:
        raise WorkloadFileError(
            path=path,
            problem=f"is more than {_mebibytes(limit)}; a workload file may be at most "
            f"{_mebibytes(limit)} (put data in a file of code_source)",
        )
    return b"".join(chunks)


def read_document(path: str) -> Any:
    """The parsed file (a :class:`WorkloadFileError` naming the file, or the field, when it cannot be read, parsed,
    or holds what :class:`.yaml_values.Refused` describes)."""
    data = _read_file(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise WorkloadFileError(path=path, problem=f"is not UTF-8 text (byte {error.start})") from None
    if not text.strip():
        raise WorkloadFileError(
            path=path, problem="is empty: a workload needs at least experiment_name, compute and command"
        )
    try:
        return yaml_values.load(text)
    except yaml_values.Refused as error:
        raise WorkloadFileError(path=error.field or path, problem=error.reason) from None
    except yaml.YAMLError as error:
        raise WorkloadFileError(path=path, problem=f"is not valid YAML: {_first_line(error, text)}") from None


def load(path: str, overrides: Sequence[str] = ()) -> Tuple[Workload, List[str]]:
    """The validated workload of a file with overrides; and the notes for stderr (changes, older spellings, what the
    snapshot leaves out or a large one)."""
    parsed = [parse_override(text) for text in overrides]  # bad overrides fail before the file is read
    document = read_document(path)
    notes: List[str] = []
    if parsed:
        if not isinstance(document, dict):
            raise WorkloadFileError(
                path=path, problem="must hold a mapping of fields (experiment_name, compute, command, ...)"
            )
        notes += apply_overrides(document, parsed)
    workload, spellings = schema.validate(document, os.path.dirname(os.path.abspath(path)))
    notes += spellings
    if workload.code_source is not None:
        notes += snapshot.survey(workload.code_source)
    return workload, notes


def _first_line(error: yaml.YAMLError, text: str = "") -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    if isinstance(error, yaml.reader.ReaderError) and text:  # a character YAML does not allow (a NUL byte...)
        before = text[: error.position]
        return (
            f"the character #x{error.character:04x} is not allowed in YAML at line {before.count(chr(10)) + 1}, "
            f"column {len(before) - before.rfind(chr(10))}"
        )
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)


def _mebibytes(size: int) -> str:
    return f"{size / (1 << 20):g} MiB" if size >= 1 << 20 else f"{size} bytes"


def _brief(value: Any) -> str:
    text = yaml_values.inline(value)
    return text if len(text) <= 60 else text[:57] + "..."
