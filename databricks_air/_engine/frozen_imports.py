"""Imports that last as long as the process, made with the cyclic garbage collector paused and then frozen.

Importing torch or MLflow makes hundreds of thousands of objects that live as long as the process. Every few hundred
new objects set off a collection, and the later ones walk the whole heap, which only grows: about a fifth of the
import's CPU time. :func:`frozen_imports` pauses the collector for the imports and then freezes what exists
(:func:`gc.freeze`): later collections, this process's and those of the processes it forks, never walk it again.
A forked rank's collections then also leave the pages it shares with its server unwritten (a collection writes into
every object it walks, which makes the kernel copy that page). This is the use ``gc.freeze`` is documented for.

Objects frozen are still freed when their last reference goes; only garbage in reference cycles among them stays.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from typing import Iterable, Iterator, List


@contextlib.contextmanager
def frozen_imports() -> Iterator[None]:
    """Run the block (imports) with the collector paused, then freeze every object there is."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


def import_for_life(modules: Iterable[str]) -> List[str]:
    """Import ``modules`` for the rest of the process's life, inside :func:`frozen_imports`; what could not be
    imported, and why. Those imported already are left alone, and with none left nothing is paused or frozen."""
    missing = [name for name in modules if name not in sys.modules]
    problems: List[str] = []
    if not missing:
        return problems
    with frozen_imports():
        for name in missing:
            try:
                importlib.import_module(name)
            except Exception as error:  # noqa: BLE001 - said to the caller; whoever needs it sees the error again
                problems.append(f"could not preload {name}: {type(error).__name__}: {error}")
    return problems
