"""Shipping the function and its arguments to the ranks.

cloudpickle pickles functions, closures and classes defined in a notebook or in ``__main__`` by value (with their
file names and source: :mod:`databricks.air._engine.by_value`), and importable ones by reference. When something
cannot be pickled, :class:`SerializationError` names it (the function, the argument, or the captured global) before
any process starts, and says what to do instead.
"""

from __future__ import annotations

import inspect
import io
import types
import warnings
from typing import Any, Iterator, List, Optional, Tuple

from databricks.air._engine import by_value
from databricks.air._engine.values import dump_value
from databricks.air._warnings import user_stacklevel
from databricks.air.exceptions import SerializationError

LARGE_CAPTURE_BYTES = 100 * 1000 * 1000
_SEARCH_DEPTH = 3


def serialize_function(function: Any) -> bytes:
    """cloudpickle ``function``; raise :class:`SerializationError` naming the culprit if it cannot be pickled."""
    name = _name(function)
    try:
        data = by_value.dumps(function)
    except Exception as error:  # pickling raises many types
        culprit = _find_unpicklable(function, name, _SEARCH_DEPTH)
        if culprit is not None:
            path, value, inner = culprit
            message = (
                f"cannot ship {name} to the ranks: it uses {path}, a {_type_name(value)} that cannot be pickled "
                f"({type(inner).__name__}: {inner}). Create it inside the function instead of capturing it."
            )
        else:
            message = f"cannot ship {name} to the ranks: {type(error).__name__}: {error}"
        raise SerializationError(message) from error
    if len(data) > LARGE_CAPTURE_BYTES:
        _warn_large_captures(function, name)
    return data


def serialize_arguments(function: Any, bound: inspect.BoundArguments) -> bytes:
    """Pickle ``(args, kwargs)``; raise :class:`SerializationError` naming the argument that cannot be pickled."""
    stream = io.BytesIO()
    try:
        dump_value((bound.args, bound.kwargs), stream)
    except Exception as error:
        for arg_name, value in bound.arguments.items():
            try:
                by_value.dumps(value)
            except Exception as inner:  # noqa: BLE001
                raise SerializationError(
                    f"cannot ship the arguments of {_name(function)} to the ranks: argument {arg_name!r} "
                    f"(a {_type_name(value)}) cannot be pickled ({type(inner).__name__}: {inner}). "
                    "Pass something picklable (a path, a config) and build the object inside the function."
                ) from error
        raise SerializationError(
            f"cannot ship the arguments of {_name(function)} to the ranks: {type(error).__name__}: {error}"
        ) from error
    return stream.getvalue()


def captured_values(function: Any) -> Iterator[Tuple[str, Any]]:
    """The globals, closure variables and defaults a function carries with it, as ``(description, value)``."""
    if not isinstance(function, types.FunctionType):
        return
    code_globals = function.__globals__
    for name in sorted(_global_names(function.__code__)):
        if name in code_globals:
            yield f"global {name!r}", code_globals[name]
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        try:
            yield f"closure variable {name!r}", cell.cell_contents
        except ValueError:  # empty cell
            continue
    for index, value in enumerate(function.__defaults__ or ()):
        yield f"default argument #{index + 1}", value
    for name, value in (function.__kwdefaults__ or {}).items():
        yield f"default of {name!r}", value


def _global_names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _find_unpicklable(function: Any, path: str, depth: int) -> Optional[Tuple[str, Any, Exception]]:
    """Depth-first search for the first captured value that does not pickle."""
    for description, value in captured_values(function):
        if isinstance(value, types.ModuleType):
            continue
        try:
            by_value.dumps(value)
            continue
        except Exception as error:  # noqa: BLE001
            where = f"{description}" if depth == _SEARCH_DEPTH else f"{description} (through {path})"
            if depth > 1 and isinstance(value, types.FunctionType):
                deeper = _find_unpicklable(value, where, depth - 1)
                if deeper is not None:
                    return deeper
            return where, value, error
    return None


def _warn_large_captures(function: Any, name: str) -> None:
    large: List[str] = []
    for description, value in captured_values(function):
        if isinstance(value, types.ModuleType):
            continue
        try:
            size = len(by_value.dumps(value))
        except Exception:  # noqa: BLE001
            continue
        if size > LARGE_CAPTURE_BYTES:
            large.append(f"{description} ({size / 1e6:.0f} MB)")
    what = ", ".join(large) if large else "its captured state"
    warnings.warn(
        f"{name} carries {what} to every rank on every call. Load large data inside the function "
        "(for example from a file path passed as an argument) instead of capturing it.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )


def _name(function: Any) -> str:
    return f"function {getattr(function, '__qualname__', None) or repr(function)!r}"


def _type_name(value: Any) -> str:
    value_type = type(value)
    module = value_type.__module__
    return value_type.__qualname__ if module == "builtins" else f"{module}.{value_type.__qualname__}"
