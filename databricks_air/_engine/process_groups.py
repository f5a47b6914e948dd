"""Process groups destroyed in a rank stay referenced until the rank exits, so that no teardown can deadlock.

Why: ``ProcessGroupGloo``'s destructor joins its worker threads. A worker thread that is releasing a finished
all-reduce may need the GIL (the work holds a Python object from the backward pass that issued it: torch stashes
the caller's ``contextvars`` context there). If the *last* reference to the group is then dropped by a C++ object
that keeps the GIL while it dies, such as ``DistributedDataParallel``'s reducer, the main thread waits for the
worker, the worker for the GIL, and the rank hangs for good. That is what happens when a function calls
``destroy_process_group()`` with its DDP model still alive and returns: freeing the model frees the group.

So every group that ``destroy_process_group`` shuts down is also kept here. It is still shut down exactly as torch
does it; only its memory lives on, and a rank ends with ``os._exit``, which runs no destructor. Torch is wrapped
where ``torch.distributed.distributed_c10d`` lives: at once if it is already imported (ranks forked from the rank
server), or the moment it is imported (fresh interpreters: ``spawn`` start method, Ray).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, Callable, List, Optional, Sequence

C10D_MODULE = "torch.distributed.distributed_c10d"
_PUBLIC_MODULE = "torch.distributed"
_WRAPPED_MARK = "__databricks_air_keeps_groups__"

kept_groups: List[Any] = []
"""Every process group destroyed in this process so far (never released: the rank ends with ``os._exit``)."""


def keep_destroyed_groups() -> None:
    """Make ``torch.distributed.destroy_process_group`` keep what it destroys; a no-op without torch."""
    module = sys.modules.get(C10D_MODULE)
    if module is not None:
        wrap_destroy(module)
    elif not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


def wrap_destroy(c10d: types.ModuleType) -> None:
    """Replace ``destroy_process_group`` in ``c10d`` (and in ``torch.distributed``) by a version that keeps groups."""
    original = getattr(c10d, "destroy_process_group", None)
    if original is None or getattr(original, _WRAPPED_MARK, False):
        return

    @functools.wraps(original)
    def destroy_process_group(group: Optional[Any] = None) -> None:
        kept_groups.extend(_groups_destroyed_by(c10d, group))
        return original(group)

    setattr(destroy_process_group, _WRAPPED_MARK, True)
    setattr(c10d, "destroy_process_group", destroy_process_group)
    public = sys.modules.get(_PUBLIC_MODULE)
    if public is not None and getattr(public, "destroy_process_group", None) is original:
        setattr(public, "destroy_process_group", destroy_process_group)


def _groups_destroyed_by(c10d: types.ModuleType, group: Optional[Any]) -> Sequence[Any]:
    """The groups a call with ``group`` is about to destroy: all of them for the default group."""
    try:
        if group is None or group is c10d.GroupMember.WORLD:
            return list(c10d._world.pg_map)
        return [group]
    except Exception:  # noqa: BLE001 - torch's internals moved: keep what we were given, never break the call
        return [group] if group is not None else []


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; hands back the real spec of ``torch.distributed.distributed_c10d``, wrapped on load."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[types.ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != C10D_MODULE:
            return None
        sys.meta_path.remove(self)  # its job is done once torch is found
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _WrappingLoader(spec.loader, wrap_destroy)
                return spec
        return None


class _WrappingLoader(importlib.abc.Loader):
    """Loads a module with ``inner``, then calls ``after`` on it; everything else is ``inner``'s."""

    def __init__(self, inner: importlib.abc.Loader, after: Callable[[types.ModuleType], None]) -> None:
        self.inner = inner
        self.after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return self.inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.inner.exec_module(module)
        self.after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename...: tracebacks and inspect keep working
        return getattr(self.inner, name)
