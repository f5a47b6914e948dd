"""Exceptions that keep their class, message and attributes when they travel between processes.

``BaseException`` pickles as ``type(error)(*error.args)`` plus the instance's ``__dict__``. A class whose
constructor takes more than the message (a path, a rank, an offset) cannot be rebuilt that way, so whoever unpickles
it gets a ``TypeError`` instead of the error: ``torch.distributed.checkpoint`` gathering every rank's failure, a Ray
driver receiving an actor's exception, the caller of ``.distributed()`` receiving a rank's.

Every exception class of this project that takes more than a message derives from :class:`RebuildableError` and
keeps one rule: **each constructor parameter is stored as an attribute of the same name**. Pickling then calls the
constructor again with those attributes and restores whatever else the instance holds (attributes set later,
``__notes__``). ``tests/launcher/test_exception_pickling.py`` walks the packages and checks the round trip for
every class,
so a class added later is covered without editing the test.

A third way across processes keeps only the text: torch's DataLoader re-raises a worker's exception in the main
process as ``cls(message)`` (the worker's formatted traceback), falling back to a ``RuntimeError`` when that call
fails. So every such constructor also accepts the message alone, its other parameters optional.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Dict, Tuple, Type

__all__ = ["RebuildableError"]


class RebuildableError:
    """Mixin for an exception class whose constructor parameters are all stored as same-named attributes.

    Put it first among the bases (``class DataFileError(RebuildableError, RuntimeError)``) so that its
    ``__reduce__`` wins over ``BaseException``'s.
    """

    def __reduce__(self) -> Tuple[Any, ...]:
        cls: type = self._pickled_class()
        arguments = {name: self._constructor_argument(name) for name in _parameters(cls)}
        state = {key: value for key, value in vars(self).items() if key not in arguments}
        return (_rebuild, (cls, arguments), state or None)

    def _pickled_class(self) -> Type[BaseException]:
        """The class an unpickled copy is made of (a class made at run time pickles as a public base)."""
        return type(self)  # type: ignore[return-value]

    def _constructor_argument(self, name: str) -> Any:
        """The value to pass as constructor parameter ``name``: the attribute of that name."""
        try:
            return getattr(self, name)
        except AttributeError:
            cls = type(self)
            raise TypeError(
                f"{cls.__module__}.{cls.__qualname__} cannot be pickled: its constructor parameter {name!r} is not "
                f"kept as an attribute of the same name (see {__name__})"
            ) from None


@functools.lru_cache(maxsize=None)
def _parameters(cls: Type[object]) -> Tuple[str, ...]:
    """The names of ``cls``'s constructor parameters that can be passed by keyword."""
    signature = inspect.signature(cls.__init__)
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in list(signature.parameters.values())[1:] if p.kind in keyword_kinds)


def _rebuild(cls: Type[BaseException], arguments: Dict[str, Any]) -> BaseException:
    return cls(**arguments)
