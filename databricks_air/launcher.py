"""The ``@distributed`` decorator and the :class:`DistributedFunction` it returns.

A call travels: decoration validates the settings once; ``.distributed(*args, **kwargs)`` binds the arguments to
the signature, pickles function and arguments (naming whatever cannot be pickled), and hands them to the process
engine, which runs the function once per rank and returns every rank's value in rank order.

Example::

    from databricks.air import distributed

    @distributed(accelerator_type="CPU", num_accelerators=2)
    def train(epochs: int) -> float:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        ...
        return loss

    losses = train.distributed(epochs=3)   # [loss of rank 0, loss of rank 1]
"""

from __future__ import annotations

import inspect
import numbers
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, List, Optional, Union

from databricks.air import compute, payload
from databricks.air._engine import launch as engine
from databricks.air._warnings import user_stacklevel
from databricks.air.exceptions import GPUValidationError, RuntimeConfigurationError

__all__ = ["distributed"]

DEFAULT_TIMEOUT = 10800
SHOW_ALL_RANKS_VARIABLE = "DATABRICKS_AIR_SHOW_ALL_RANKS"
START_METHOD_VARIABLE = "DATABRICKS_AIR_START_METHOD"
LOG_DIR_VARIABLE = "DATABRICKS_AIR_LOG_DIR"
GRACE_VARIABLE = "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS"

_UNSET: Any = object()


def _check_timeout(timeout: Any) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise RuntimeConfigurationError(
            f"timeout must be None or a positive number of seconds, not {timeout!r} ({type(timeout).__name__})"
        )
    if timeout <= 0:
        raise RuntimeConfigurationError(
            f"timeout must be a positive number of seconds, not {timeout!r}; pass timeout=None for no limit"
        )
    return timeout


def _check_count(num_accelerators: Any) -> Optional[int]:
    if num_accelerators is None:
        return None
    if isinstance(num_accelerators, bool) or not isinstance(num_accelerators, int):
        raise GPUValidationError(
            f"num_accelerators must be an int, not {type(num_accelerators).__name__} ({num_accelerators!r})"
        )
    if num_accelerators <= 0:
        raise GPUValidationError(f"num_accelerators must be at least 1, not {num_accelerators}")
    return num_accelerators


def _fold_deprecated(
    num_accelerators: Any, accelerator_type: Any, gpus: Any, gpu_type: Any, api: str
) -> tuple:
    """Map the old ``gpus``/``gpu_type`` names onto the new ones, with a ``FutureWarning`` each."""
    if gpus is not None:
        if num_accelerators is not None:
            raise RuntimeConfigurationError(
                f"{api}: pass either num_accelerators or the deprecated gpus, not both (use num_accelerators)"
            )
        warnings.warn(
            f"{api}: the gpus parameter is deprecated; use num_accelerators={gpus!r} instead",
            FutureWarning,
            stacklevel=user_stacklevel(),
        )
        num_accelerators = gpus
    if gpu_type is not None:
        if accelerator_type is not None:
            raise RuntimeConfigurationError(
                f"{api}: pass either accelerator_type or the deprecated gpu_type, not both (use accelerator_type)"
            )
        warnings.warn(
            f"{api}: the gpu_type parameter is deprecated; use accelerator_type={getattr(gpu_type, 'value', gpu_type)!r}"
            " instead",
            FutureWarning,
            stacklevel=user_stacklevel(),
        )
        accelerator_type = gpu_type
    return num_accelerators, accelerator_type


def _resolve_local(num_accelerators: Optional[int], accelerator_type: Any) -> tuple:
    """``(count, accelerator type)`` for a run on this machine; checks what is attached."""
    if compute.cpu_mode_requested(accelerator_type):
        return num_accelerators or 1, compute.CPU
    available = compute.attached_gpu_count()
    if available <= 0:
        raise GPUValidationError(
            "no GPU is attached to this machine. To run on CPU ranks over gloo instead, decorate with "
            '@distributed(accelerator_type="CPU", num_accelerators=N) or set the environment variable '
            f"{compute.ACCELERATOR_TYPE_VARIABLE}=CPU (then use dist.init_process_group(\"gloo\") in the function)."
        )
    if num_accelerators is not None and num_accelerators > available:
        raise GPUValidationError(
            f"num_accelerators={num_accelerators} requested, but only {available} GPU(s) are visible on this "
            "machine (CUDA_VISIBLE_DEVICES is honoured). Pass num_accelerators between 1 and "
            f"{available}, or omit it to use all of them."
        )
    return num_accelerators or available, accelerator_type


class DistributedFunction:
    """A function decorated with ``@distributed(...)``: run it with :meth:`distributed`.

    Attributes:
        func: the original function (call it directly to run it once in this process).
        num_accelerators: the number of ranks (``gpus`` is its old name).
        accelerator_type: ``"CPU"`` in CPU mode, else the type given (or ``None``: whatever GPUs are attached).
        remote: whether the function runs off this machine (not supported yet).
        timeout: seconds the whole call may take, or ``None``.
    """

    def __init__(
        self,
        gpus: int,
        gpu_type: Any,
        remote: bool,
        func: Callable[..., Any],
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        accelerator_type: Any = None,
    ) -> None:
        if not callable(func):
            raise RuntimeConfigurationError(f"@distributed() decorates a function, not {type(func).__name__}")
        self.gpus = gpus
        self.gpu_type = gpu_type
        self.remote = remote
        self.func = func
        self.timeout = _check_timeout(timeout)
        self._accelerator_type = accelerator_type if accelerator_type is not None else gpu_type
        self.last_log_dir: Optional[str] = None

    @property
    def num_accelerators(self) -> int:
        return self.gpus

    @property
    def accelerator_type(self) -> Any:
        return self._accelerator_type

    @property
    def gpus_per_node(self) -> int:
        # One node: every rank is on this machine.
        return self.gpus

    def __repr__(self) -> str:
        kind = getattr(self.accelerator_type, "value", self.accelerator_type)
        name = getattr(self.func, "__qualname__", repr(self.func))
        return (
            f"DistributedFunction(num_accelerators={self.num_accelerators}, accelerator_type={kind}, "
            f"remote={self.remote}, timeout={self.timeout}, func={name})"
        )

    __str__ = __repr__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = getattr(self.func, "__name__", "the function")
        raise RuntimeConfigurationError(
            f"{name} is decorated with @distributed(); call {name}.distributed(...) to run it on "
            f"{self.num_accelerators} rank(s), or {name}.func(...) to run the plain function here."
        )

    def with_overrides(
        self,
        num_accelerators: Any = _UNSET,
        accelerator_type: Any = _UNSET,
        timeout: Any = _UNSET,
        *,
        gpus: Any = None,
        gpu_type: Any = None,
    ) -> "DistributedFunction":
        """A copy with some settings changed; this object stays as it is. ``timeout=None`` removes the cap."""
        count = None if num_accelerators is _UNSET else num_accelerators
        kind = None if accelerator_type is _UNSET else accelerator_type
        count, kind = _fold_deprecated(count, kind, gpus, gpu_type, "with_overrides")
        if count is None:
            count = self.num_accelerators
        if kind is None:
            kind = self.accelerator_type
        return _build(
            self.func,
            count,
            kind,
            self.remote,
            self.timeout if timeout is _UNSET else timeout,
            explicit_count=True,
        )

    def distributed(self, *args: Any, **kwargs: Any) -> List[Any]:
        """Run the function once per rank and return every rank's value, indexed by global rank.

        Raises:
            TypeError: the arguments do not fit the function's signature (nothing was started).
            SerializationError: the function, an argument or a return value cannot be pickled.
            DistributedExecutionError: a rank failed; also an instance of that rank's exception class.
            LocalExecutionTimeoutError: the call ran past ``timeout``.
            KeyboardInterrupt: the call was interrupted; every rank was stopped.
        """
        bound = inspect.signature(self.func).bind(*args, **kwargs)
        bound.apply_defaults()
        function_bytes = payload.serialize_function(self.func)
        argument_bytes = payload.serialize_arguments(self.func, bound)
        log_dir = _make_log_dir(getattr(self.func, "__name__", "function"))
        self.last_log_dir = log_dir
        name = getattr(self.func, "__qualname__", "function")
        kind = getattr(self.accelerator_type, "value", self.accelerator_type) or "GPU"
        print(
            f"databricks.air: running {name} on {self.num_accelerators} {kind} rank(s); logs: {log_dir}",
            file=sys.stderr,
            flush=True,
        )
        return engine.run(
            engine.Launch(
                name=name,
                world_size=self.num_accelerators,
                function=function_bytes,
                arguments=argument_bytes,
                environ=dict(os.environ),
                cwd=os.getcwd(),
                sys_path=list(sys.path),
                log_dir=log_dir,
                timeout=self.timeout,
                timeout_note=_timeout_note(self.timeout),
                show_all_ranks=_flag(SHOW_ALL_RANKS_VARIABLE),
                start_method=os.environ.get(START_METHOD_VARIABLE, "fork").strip().lower() or "fork",
                grace_period=_grace_period(),
                code_files=payload.code_files(self.func),
            )
        )


def _timeout_note(timeout: Optional[float]) -> str:
    default = " (the default cap of 3 hours)" if timeout == DEFAULT_TIMEOUT else ""
    return (
        f"The limit{default} is set with @distributed(timeout=SECONDS) or .with_overrides(timeout=SECONDS); "
        "timeout=None removes it. "
    )


def _flag(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in ("1", "true", "yes")


def _grace_period() -> float:
    value = os.environ.get(GRACE_VARIABLE, "")
    try:
        return max(0.0, float(value)) if value else 3.0
    except ValueError:
        raise RuntimeConfigurationError(f"{GRACE_VARIABLE} must be a number of seconds, not {value!r}") from None


def _make_log_dir(function_name: str) -> str:
    """A new directory for this call's logs (kept after the call), under ``DATABRICKS_AIR_LOG_DIR`` or tmp."""
    root = os.environ.get(LOG_DIR_VARIABLE) or os.path.join(tempfile.gettempdir(), "databricks-air-logs")
    os.makedirs(root, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in function_name)[:60]
    return tempfile.mkdtemp(prefix=f"{stamp}-{safe}-", dir=root)


def _build(
    func: Callable[..., Any],
    num_accelerators: Any,
    accelerator_type: Any,
    remote: bool,
    timeout: Any,
    explicit_count: bool = False,
) -> DistributedFunction:
    timeout = _check_timeout(timeout)
    count = _check_count(num_accelerators)
    if remote:
        raise RuntimeConfigurationError(
            "remote=True runs the function on a Ray cluster, which is not available in this version yet. "
            "Use remote=False to run on this machine's GPUs (or CPU ranks)."
        )
    count, kind = _resolve_local(count, accelerator_type)
    return DistributedFunction(count, kind, remote, func, timeout=timeout, accelerator_type=kind)


def distributed(
    num_accelerators: Optional[int] = None,
    accelerator_type: Any = None,
    remote: bool = False,
    timeout: Optional[Union[int, float]] = DEFAULT_TIMEOUT,
    *,
    gpus: Optional[int] = None,
    gpu_type: Any = None,
) -> Callable[[Callable[..., Any]], DistributedFunction]:
    """Decorate a function so that ``fn.distributed(...)`` runs it once per accelerator of this machine.

    Args:
        num_accelerators: the number of ranks; default every visible GPU (1 in CPU mode).
        accelerator_type: optional; ``"CPU"`` runs CPU ranks over gloo (so does ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU``).
        remote: ``True`` would run off this machine; not supported yet.
        timeout: seconds the whole call may take (default 3 hours); ``None`` for no limit.
        gpus: deprecated name of ``num_accelerators``.
        gpu_type: deprecated name of ``accelerator_type``.
    """
    checked_timeout = _check_timeout(timeout)
    count, kind = _fold_deprecated(num_accelerators, accelerator_type, gpus, gpu_type, "@distributed")
    # Validate now, not at the first call, so that configuration errors show where the decorator is.
    _check_count(count)

    def decorate(func: Callable[..., Any]) -> DistributedFunction:
        if isinstance(func, DistributedFunction):
            raise RuntimeConfigurationError("this function is already decorated with @distributed()")
        return _build(func, count, kind, remote, checked_timeout)

    return decorate
