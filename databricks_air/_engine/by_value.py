"""Code that travels by value: where it came from, and how it travels on from a rank.

cloudpickle ships the functions and classes of ``__main__`` (a script, a notebook) by value: a rank rebuilds them
from their code, since it cannot import them. Two things are lost on the way with cloudpickle alone, and kept here:

* **Where the code came from.** cloudpickle names the file of every code object ``<dynamic-code>``. :class:`Pickler`
  ships each code object whole, as ``marshal`` (the format of ``.pyc`` files) writes it, so with its real file name
  and line numbers; and with it, once per pickle, the lines of that file as the sender's ``linecache`` holds them
  (a script's file at call time, or a notebook cell's source, which exists nowhere else). Where the code lands, the
  lines go into ``linecache``: ``inspect.getsource``, tracebacks and ``torch.jit.script`` work as in the caller.
* **Travelling on.** In the caller, ``pickle`` finds ``__main__.Dataset`` by name; a process started with ``spawn``
  re-runs the caller's script to define it again. In a rank, neither holds: the rank's ``__main__`` is not the
  caller's, and a process the rank spawns (``DataLoader(num_workers=2, multiprocessing_context="spawn")``,
  ``torch.multiprocessing.spawn``) has no copy of the caller's ``__main__`` to re-run. :func:`define_in_main` puts
  the names the function carries into the rank's ``__main__`` (so ``pickle.dumps`` and ``torch.save`` in the rank
  find them by name, and the caller loads what they wrote); :func:`pass_on_by_value` makes ``multiprocessing``
  pickle the classes and functions of ``__main__`` by value, as cloudpickle does.

Example::

    data = dumps(train)                    # in the caller
    train = pickle.loads(data)             # in a rank: train.__code__.co_filename is the caller's file
    define_in_main(train)
    pass_on_by_value()
"""

from __future__ import annotations

import importlib
import io
import linecache
import marshal
import pickle
import sys
import types
import weakref
from typing import Any, Dict, List, Optional

import cloudpickle


class Pickler(cloudpickle.CloudPickler):
    """cloudpickle, with the code it ships by value keeping its file name and source, and with entries of
    ``sys.modules`` that are not plain modules going by name.

    With a function, cloudpickle also ships each loaded submodule of a package the function uses whose name parts
    all appear among the code's names. ``torch.ops`` is such an entry, of a subclass of the module type that
    cloudpickle's table (keyed by exact type) does not know: pickled by value it failed ("cannot pickle '_Ops'
    object") for any function using ``torch`` and some other ``.ops`` attribute (``deepspeed.ops``,
    ``torchvision.ops``). By name, the receiver gets its own, as an import would give it.
    """

    def __init__(self, file: Any, protocol: Optional[int] = pickle.HIGHEST_PROTOCOL, **kwargs: Any) -> None:
        super().__init__(file, protocol=protocol, **kwargs)
        # A copy, made in one step: building a list of (name, module) pairs allocates, which can run the garbage
        # collector and let another thread (MLflow's async logging in a rank) import a module half-way through.
        self._module_entries = {
            id(value): name
            for name, value in sys.modules.copy().items()
            if value is not None and type(value) is not types.ModuleType  # exact type on purpose
        }
        # File name -> its lines, read once per pickle; the same list each time, so that the pickle holds it once.
        self._sources: Dict[str, Optional[List[str]]] = {}

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            return self._reduce_code(obj)
        name = self._module_entries.get(id(obj))
        if name is not None and sys.modules.get(name) is obj:
            return importlib.import_module, (name,)
        return super().reducer_override(obj)

    def _reduce_code(self, code: types.CodeType) -> Any:
        filename = code.co_filename
        if filename not in self._sources:
            self._sources[filename] = _source_lines(filename)
        # Nested code (inner functions, comprehensions) is inside the marshalled bytes, compiled from the same file.
        return _rebuild_code, (marshal.dumps(code), filename, self._sources[filename])


def dumps(value: Any) -> bytes:
    """Pickle ``value`` with :class:`Pickler`; ``pickle.loads`` reads it back."""
    stream = io.BytesIO()
    Pickler(stream).dump(value)
    return stream.getvalue()


def _source_lines(filename: str) -> Optional[List[str]]:
    """The file's lines as tracebacks here would show them now (``None`` where there are none: ``<string>``)."""
    linecache.checkcache(filename)  # a file edited since it was read is read again; a notebook cell stays as it is
    return linecache.getlines(filename) or None


def _rebuild_code(data: bytes, filename: str, lines: Optional[List[str]]) -> types.CodeType:
    """The code object, its source lines given to ``linecache`` unless this process has that file's lines already."""
    if lines and filename not in linecache.cache:
        # No modification time: linecache.checkcache keeps the entry, as it does a notebook cell's.
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    return marshal.loads(data)


# --- in the rank ------------------------------------------------------------------------------------------------------


def define_in_main(function: Any) -> None:
    """Define in this process's ``__main__`` the globals that ``function``, shipped by value from the caller's
    ``__main__``, carries with it (the classes, functions and values its code uses)."""
    if getattr(function, "__module__", None) != "__main__" or not isinstance(function, types.FunctionType):
        return
    main = sys.modules["__main__"]
    for name, value in function.__globals__.items():
        if not (name.startswith("__") and name.endswith("__")):  # keep this process's __name__, __builtins__...
            setattr(main, name, value)


# What each object shipped on by value pickles to, and what each pickle read back: a class in the items of every
# batch a DataLoader worker sends is pickled, and read, once.
_shipped: "weakref.WeakKeyDictionary[Any, bytes]" = weakref.WeakKeyDictionary()
_received: Dict[bytes, Any] = {}


def pass_on_by_value() -> None:
    """Make ``multiprocessing`` (spawn and forkserver starts, queues, pools) pickle the classes and functions of
    ``__main__`` by value in this process, and in the processes they reach."""
    from multiprocessing.reduction import ForkingPickler

    # Consulted by the pickler before its own handling of classes and functions, which only names them; copyreg's
    # table, which ForkingPickler.register fills, is never asked about classes or functions.
    ForkingPickler.reducer_override = _main_by_value  # type: ignore[method-assign]  # (patched on purpose)


def _main_by_value(pickler: Any, obj: Any) -> Any:
    if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
        data = _shipped.get(obj)
        if data is None:
            data = _shipped[obj] = dumps(obj)
        return _receive, (data,)
    return NotImplemented


def _receive(data: bytes) -> Any:
    """A class or function of the sender's ``__main__``; this process passes it on by value in turn."""
    value = _received.get(data)
    if value is None:
        pass_on_by_value()
        value = _received[data] = pickle.loads(data)
    return value
