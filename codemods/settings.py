"""The settings of a run: the command line's options over the ``[tool.air-migrate]`` table of a ``pyproject.toml``,
over the defaults; and where each one came from (``--show-settings``).

The table is looked for as ruff looks for its own: in ``pyproject.toml`` in the current directory, then in each
directory above it, up to the root; a ``pyproject.toml`` without a ``[tool.air-migrate]`` table is passed over (as
ruff passes over one without ``[tool.ruff]``), and the first one that has it is the only one read (nothing is merged
from files further up). ``--isolated`` reads none. An option given on the command line replaces the file's value
of that key (``--exclude`` too, as ruff's does); ``--no-fix-pip`` and ``--no-todo-comments`` turn off what a file
turns on.

Keys: ``select``, ``ignore`` (lists of rule codes), ``exclude`` (a list of globs, as ``--exclude``), ``fix-pip``,
``todo-comments`` (booleans), ``pip-package`` (a string, as ``--pip-package``). A key the table does not know, a
value of the wrong type or an unknown rule code is an error that names the file, the key and what to write
(:class:`ConfigError`; the command exits 2).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Tuple


FILE_NAME = "pyproject.toml"
TABLE = "air-migrate"
COMMAND_LINE = "command line"
DEFAULT = "default"


class ConfigError(Exception):
    """A ``[tool.air-migrate]`` table that cannot be used; the message names the file, the key and the fix."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting's value and where it came from: a file's path, :data:`COMMAND_LINE` or :data:`DEFAULT`."""

    value: Any
    source: str


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a run uses."""

    select: Setting
    """Rule codes, a tuple (empty: every rule)."""
    ignore: Setting
    exclude: Setting
    fix_pip: Setting
    pip_package: Setting
    todo_comments: Setting
    config: Optional[str]
    """The ``pyproject.toml`` read, if one was."""
    searched_from: Optional[str]
    """The directory the search for it started in (``None`` with ``--isolated``)."""

    def items(self) -> List[Tuple[str, Setting]]:
        """``(key as the table spells it, setting)``, in the table's order."""
        return [(key, getattr(self, attribute)) for key, attribute, _ in _KEYS]


def _strings(what: str) -> Callable[[Any], Optional[str]]:
    def problem(value: Any) -> Optional[str]:
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return None
        return f"must be a list of {what} (e.g. {_EXAMPLES[what]}), not {_describe(value)}"

    return problem


def _boolean(value: Any) -> Optional[str]:
    return None if isinstance(value, bool) else f"must be true or false, not {_describe(value)}"


def _string(value: Any) -> Optional[str]:
    return None if isinstance(value, str) else f'must be a string (e.g. "databricks-air-oss"), not {_describe(value)}'


_EXAMPLES = {"rule codes": '["AM101", "AM102"]', "globs": '["build", "tests/*.py"]'}
_KEYS: Tuple[Tuple[str, str, Callable[[Any], Optional[str]]], ...] = (
    ("select", "select", _strings("rule codes")),
    ("ignore", "ignore", _strings("rule codes")),
    ("exclude", "exclude", _strings("globs")),
    ("fix-pip", "fix_pip", _boolean),
    ("pip-package", "pip_package", _string),
    ("todo-comments", "todo_comments", _boolean),
)
_DEFAULTS: Dict[str, Any] = {
    "select": (),
    "ignore": (),
    "exclude": (),
    "fix_pip": False,
    "pip_package": None,
    "todo_comments": False,
}


# A package name, optional extras, optional version specifiers; no spaces or shell characters.
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,-]+\])?"
    r"(?:(?:===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+(?:,(?:===|==|!=|~=|<=|>=|<|>)"
    r"[A-Za-z0-9.*+!_-]+)*)?$"
)


def requirement_problem(text: str) -> Optional[str]:
    """Why ``text`` is not one package requirement for ``--fix-pip`` to install, if it is not."""
    if _REQUIREMENT.match(text):
        return None
    return f"{text!r} is not one package requirement (e.g. databricks-air-oss or databricks-air-oss==0.3)"


def _describe(value: Any) -> str:
    names = {bool: "a boolean", str: "a string", int: "a number", float: "a number", list: "a list", dict: "a table"}
    kind = names.get(type(value), type(value).__name__)
    return f"{kind} ({value!r})" if not isinstance(value, (list, dict)) else kind


def find_config(start: str) -> Optional[Tuple[str, Mapping[str, Any]]]:
    """The first ``pyproject.toml`` from ``start`` upward that has a ``[tool.air-migrate]`` table, with the table."""
    directory = os.path.abspath(start)
    while True:
        candidate = os.path.join(directory, FILE_NAME)
        if os.path.isfile(candidate):
            table = _table(candidate)
            if table is not None:
                return candidate, table
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _table(path: str) -> Optional[Mapping[str, Any]]:
    # Imported here: most runs find no pyproject.toml, and start-up counts for a command run on one notebook.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the project supports Python 3.10, whose standard library has no TOML reader
        import tomli as tomllib
    try:
        with open(path, "rb") as stream:
            document = tomllib.load(stream)
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(
            f"{path}: not valid TOML: {error}; fix the file, or run with --isolated to read no configuration"
        ) from None
    tool = document.get("tool")
    if not isinstance(tool, dict) or TABLE not in tool:
        return None
    table = tool[TABLE]
    if not isinstance(table, dict):
        raise ConfigError(
            f"{path}: tool.{TABLE} must be a table ([tool.{TABLE}] with keys such as select = "
            f'["AM101"]), not {_describe(table)}'
        )
    return table


def read_table(path: str, table: Mapping[str, Any], rule_codes: Collection[str]) -> Dict[str, Any]:
    """The table's values by attribute name, checked: unknown keys, wrong types and unknown codes are errors."""
    known = {key: (attribute, check) for key, attribute, check in _KEYS}
    values: Dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            import difflib  # (only for a key the table does not know)

            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{path}: [tool.{TABLE}] has an unknown key {key!r}{hint}; the keys are {', '.join(known)}"
            )
        attribute, check = known[key]
        problem = check(value)
        if problem is not None:
            raise ConfigError(f"{path}: [tool.{TABLE}] {key} {problem}")
        if attribute in ("select", "ignore"):
            value = _rule_codes(path, key, value, rule_codes)
        elif attribute == "exclude":
            value = tuple(value)
        values[attribute] = value
    if "pip_package" in values:
        problem = requirement_problem(values["pip_package"])
        if problem is not None:
            raise ConfigError(f"{path}: [tool.{TABLE}] pip-package {problem}")
    return values


def _rule_codes(path: str, key: str, value: List[str], rule_codes: Collection[str]) -> Tuple[str, ...]:
    codes = tuple(code.strip().upper() for code in value)
    if key == "select" and not codes:
        raise ConfigError(f"{path}: [tool.{TABLE}] select is empty: leave it out to run every rule")
    unknown = sorted(set(codes) - set(rule_codes))
    if unknown:
        raise ConfigError(
            f"{path}: [tool.{TABLE}] {key} has unknown rule code(s) {', '.join(unknown)}; the rule "
            f"codes are {', '.join(sorted(rule_codes))} (see air-migrate --list-rules)"
        )
    return codes


def resolve(
    given: Mapping[str, Any], rule_codes: Collection[str], start: Optional[str] = None, isolated: bool = False
) -> Settings:
    """The settings in force: ``given`` (attribute -> value from the command line, ``None`` when not given) over
    the configuration found from ``start`` (default: the current directory) upward, over the defaults."""
    searched_from = None if isolated else os.path.abspath(start or os.getcwd())
    found = None if searched_from is None else find_config(searched_from)
    from_file = read_table(found[0], found[1], rule_codes) if found else {}
    chosen: Dict[str, Setting] = {}
    for _, attribute, _ in _KEYS:
        if given.get(attribute) is not None:
            chosen[attribute] = Setting(given[attribute], COMMAND_LINE)
        elif attribute in from_file:
            chosen[attribute] = Setting(from_file[attribute], found[0])  # type: ignore[index]
        else:
            chosen[attribute] = Setting(_DEFAULTS[attribute], DEFAULT)
    return Settings(**chosen, config=found[0] if found else None, searched_from=searched_from)


def render(settings: Settings, rules: Collection[str]) -> str:
    """What ``--show-settings`` prints: the file read, each setting with its value and its source, the rules."""
    if settings.config is not None:
        lines = [f"configuration: {settings.config}"]
    elif settings.searched_from is None:
        lines = ["configuration: none (--isolated)"]
    else:
        lines = [
            f"configuration: none (no {FILE_NAME} with a [tool.{TABLE}] table in {settings.searched_from} or above)"
        ]
    rows = [(key, _shown(setting.value), setting.source) for key, setting in settings.items()]
    width = max(len(key) for key, _, _ in rows)
    value_width = max(len(value) for _, value, _ in rows)
    lines += [f"  {key:<{width}}  {value:<{value_width}}  ({source})" for key, value, source in rows]
    lines.append(f"rules in force: {', '.join(rules) if rules else '(none)'}")
    return "\n".join(lines) + "\n"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "(none)"
    if isinstance(value, tuple):
        return "[" + ", ".join(f'"{item}"' for item in value) + "]"
    return f'"{value}"'
