"""Checking and resolving the settings of ``@distributed``, ``@ray_launch`` and ``with_overrides``.

The order is the reference's: the timeout first (so that a machine without GPUs still reports configuration
errors), then the deprecated names ``gpus``/``gpu_type`` and values (a ``FutureWarning`` each, attributed to the
user's own line), then the count and the accelerator type against what this machine has, or, for ``remote=True``,
against the rules of a cluster: :func:`resolve`, which gives the :class:`RankSettings` a decorated function keeps.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import numbers
import os
import warnings
from typing import Any, Optional, Set, Tuple, Union

from databricks.air import _variables, compute
from databricks.air._warnings import user_stacklevel
from databricks.air.compute import AcceleratorType, GPUType
from databricks.air.exceptions import GPUTypeError, GPUValidationError, RuntimeConfigurationError

logger = logging.getLogger("databricks.air")

DEFAULT_TIMEOUT = 10800
REMOVAL_NOTICE = "The deprecated form will be removed in AI runtime client image v7."

RequestedType = Union[AcceleratorType, GPUType, None]


@dataclasses.dataclass(frozen=True)
class RankSettings:
    """How many ranks a decorated function runs, and on what: resolved once, when it is decorated."""

    count: int
    shape: Optional[AcceleratorType]
    """The resolved shape: the attached one, the remote one, ``CPU``; ``None`` for GPU models without a shape
    (H200, A100...)."""
    gpu_type: Optional[GPUType]
    """The GPU model (``None`` for CPU ranks, and for models the reference does not name)."""
    requested: RequestedType
    """What was asked for: ``with_overrides`` keeps it, so that a new count re-derives the shape."""

    @classmethod
    def given(cls, count: int, gpu_type: Any, accelerator_type: Any) -> "RankSettings":
        """Settings taken as given, not checked against a machine (``DistributedFunction(...)`` built directly)."""
        shape, _ = parse_type(accelerator_type)
        model, _ = parse_type(gpu_type)
        if isinstance(model, AcceleratorType):  # a shape passed as gpu_type
            shape, model = shape or model, model.gpu_type
        gpu = model if model is not None else getattr(shape, "gpu_type", None)
        requested = shape or gpu
        if shape is None and gpu is not None:
            shape = AcceleratorType.from_gpu_type(gpu, count)
        return cls(count, shape, gpu, requested)  # type: ignore[arg-type]


def resolve(count: Optional[int], requested: RequestedType, remote: bool) -> RankSettings:
    """The settings of a run on this machine, checked against its GPUs, or of a ``remote`` run on a Ray cluster."""
    count, shape = resolve_remote(count, requested) if remote else resolve_local(count, requested)
    return RankSettings(count, shape, shape.gpu_type if shape is not None else None, requested)


def check_timeout(timeout: Any) -> Optional[Union[int, float]]:
    """``None`` or a positive number of seconds; infinity is taken as ``None`` (no limit), NaN is refused."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise RuntimeConfigurationError(
            f"timeout must be None or a positive number of seconds, not {timeout!r} ({type(timeout).__name__})"
        )
    if math.isnan(timeout):  # every comparison with NaN is false: it would have meant no limit, unsaid
        raise RuntimeConfigurationError(
            "timeout must be a positive number of seconds, not NaN; pass timeout=None for no limit"
        )
    if math.isinf(timeout) and timeout > 0:  # type: ignore[operator]  # (typeshed's numbers.Real has no __gt__)
        return None  # the same as None, which says it more plainly (and keeps the deadline arithmetic finite)
    if timeout <= 0:
        raise RuntimeConfigurationError(
            f"timeout must be a positive number of seconds, not {timeout!r}; pass timeout=None for no limit"
        )
    return timeout  # type: ignore[return-value]  # (any real number, as given)


MAX_RESTARTS_LIMIT = 100
"""More restarts than this is a loop, not resilience: a machine that fails a hundred times needs a person."""


def check_restarts(max_restarts: Any, restart_on: Any) -> Tuple[int, Tuple[type, ...]]:
    """``max_restarts`` a whole number from 0 to :data:`MAX_RESTARTS_LIMIT`; ``restart_on`` exception classes."""
    whole = isinstance(max_restarts, int) and not isinstance(max_restarts, bool)
    if not whole or not 0 <= max_restarts <= MAX_RESTARTS_LIMIT:
        raise RuntimeConfigurationError(
            f"max_restarts must be a whole number from 0 to {MAX_RESTARTS_LIMIT}, not {max_restarts!r}; 0 (the "
            "default) never restarts"
        )
    classes = (restart_on,) if isinstance(restart_on, type) else tuple(restart_on or ())
    wrong = [item for item in classes if not (isinstance(item, type) and issubclass(item, BaseException))]
    if wrong:
        raise RuntimeConfigurationError(
            f"restart_on takes exception classes, such as (ValueError, OSError), not {wrong[0]!r}"
        )
    if any(issubclass(item, (KeyboardInterrupt, SystemExit)) for item in classes):
        raise RuntimeConfigurationError("restart_on cannot name KeyboardInterrupt or SystemExit: an interrupt stops")
    return max_restarts, classes


def check_count(num_accelerators: Any) -> Optional[int]:
    """``None`` or a positive ``int`` (not a ``bool``)."""
    if num_accelerators is None:
        return None
    if isinstance(num_accelerators, bool) or not isinstance(num_accelerators, int):
        raise GPUValidationError(
            f"num_accelerators must be an int, not {type(num_accelerators).__name__} ({num_accelerators!r})"
        )
    if num_accelerators <= 0:
        raise GPUValidationError(f"num_accelerators must be at least 1, not {num_accelerators}")
    return num_accelerators


def parse_type(value: Any) -> Tuple[RequestedType, bool]:
    """``(type, is_legacy)``: ``AcceleratorType`` first (case-insensitive), then the legacy ``GPUType``."""
    if value is None:
        return None, False
    if isinstance(value, AcceleratorType):
        return value, False
    if isinstance(value, GPUType):
        return value, True
    try:
        return AcceleratorType(value), False
    except GPUTypeError:
        pass
    try:
        return GPUType(value), True
    except GPUTypeError:
        raise GPUTypeError(
            f'unknown accelerator type {value!r}; expected one of {AcceleratorType.values()} (or "CPU" for CPU ranks)'
        ) from None


def _suggestion(model: GPUType, count: Optional[int]) -> str:
    if count is not None:
        return f'accelerator_type="{AcceleratorType.from_gpu_type(model, count).value}"'
    return f"accelerator_type set to one of {AcceleratorType.values()}"


def _warn(message: str) -> None:
    warnings.warn(f"{message} {REMOVAL_NOTICE}", FutureWarning, stacklevel=user_stacklevel())


def normalize_names(
    num_accelerators: Any,
    accelerator_type: Any,
    gpus: Any,
    gpu_type: Any,
    api: str,
    known_count: Optional[int] = None,
) -> Tuple[Any, RequestedType]:
    """Fold ``gpus``/``gpu_type`` into the new names and parse the type, warning once per deprecated thing.

    ``known_count`` (the function's current count, for ``with_overrides``) makes suggestions exact.
    """
    if gpus is not None and num_accelerators is not None:
        raise RuntimeConfigurationError(
            f"{api}: cannot combine num_accelerators={num_accelerators!r} with the deprecated gpus={gpus!r}; "
            "pass num_accelerators only"
        )
    if gpu_type is not None and accelerator_type is not None:
        raise RuntimeConfigurationError(
            f"{api}: cannot combine accelerator_type={_shown(accelerator_type)!r} with the deprecated "
            f"gpu_type={_shown(gpu_type)!r}; pass accelerator_type only"
        )
    if gpus is not None:
        _warn(f"The gpus parameter is deprecated; use num_accelerators={gpus!r} in {api} instead.")
        num_accelerators = gpus
    count = num_accelerators if isinstance(num_accelerators, int) else known_count
    given = gpu_type if gpu_type is not None else accelerator_type
    requested, legacy = parse_type(given)
    if gpu_type is not None and not legacy:
        assert requested is not None  # (parsed from gpu_type, which is given)
        _warn(f'The gpu_type parameter is deprecated; use accelerator_type="{requested.value}" in {api} instead.')
    elif legacy:
        what = (
            f"The gpu_type parameter and its value {_shown(given)!r} are deprecated"
            if gpu_type is not None
            else f"accelerator_type={_shown(given)!r} uses a deprecated GPU type"
        )
        _warn(f"{what}; use {_suggestion(requested, count)} in {api} instead.")  # type: ignore[arg-type]
    return num_accelerators, requested


def _shown(value: Any) -> Any:
    return value.value if isinstance(value, (AcceleratorType, GPUType)) else value


CPU_RANKS_PER_CORE = 8
MIN_CPU_RANK_LIMIT = 16
"""How many CPU ranks a machine may run: :data:`CPU_RANKS_PER_CORE` per core this process may use, and at least
:data:`MIN_CPU_RANK_LIMIT`. Each rank is a whole interpreter with torch loaded (some 300 MB before it does
anything) plus gloo's threads; past a few ranks per core they only take turns, and far past it they exhaust memory
or process limits long after the call printed and recorded its start. Some oversubscription is still wanted: CPU
ranks are mostly for trying out a distributed program, and a 2-core laptop or CI machine should run a world of 16."""


def cpu_rank_limit() -> Tuple[int, int]:
    """``(cores, ranks)``: the CPU cores this process may use (its affinity, which containers and ``taskset``
    narrow), and the most CPU ranks a call may run on them."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return cores, max(MIN_CPU_RANK_LIMIT, CPU_RANKS_PER_CORE * cores)


def _cpu_ranks(count: Optional[int], requested: RequestedType, remote: bool) -> Tuple[int, AcceleratorType]:
    """CPU ranks: asked for with ``accelerator_type="CPU"``, or for any type by ``DATABRICKS_AIR_ACCELERATOR_TYPE``."""
    where = " on the Ray cluster" if remote else ""
    if count is None:
        if remote:
            raise GPUValidationError(f"remote=True needs num_accelerators: the number of ranks to run{where}")
        count = 1
    if not remote:  # a Ray cluster counts its own CPUs when it places the ranks
        cores, allowed = cpu_rank_limit()
        if count > allowed:
            raise GPUValidationError(
                f"num_accelerators={count} CPU ranks is more than this machine can run: this process may use "
                f"{cores} CPU core(s), which run at most {allowed} CPU ranks ({CPU_RANKS_PER_CORE} per core, "
                f"at least {MIN_CPU_RANK_LIMIT} on any machine), each a Python process with torch loaded. Pass "
                f"num_accelerators between 1 and {allowed}."
            )
    if requested not in (None, AcceleratorType.CPU):  # code that names a GPU, run on CPU ranks by the variable
        logger.warning(
            "%s=CPU: running %d CPU rank(s)%s instead of accelerator_type=%s",
            _variables.ACCELERATOR_TYPE,
            count,
            where,
            _shown(requested),
        )
    return count, AcceleratorType.CPU


def resolve_remote(count: Optional[int], requested: RequestedType) -> Tuple[int, AcceleratorType]:
    """The count and shape of a remote run, by the reference's rules for remote runs (CPU ranks aside)."""
    if compute.cpu_mode_from_environment() or requested is AcceleratorType.CPU:
        return _cpu_ranks(count, requested, remote=True)
    if count is None:
        raise GPUValidationError("remote=True needs num_accelerators: the number of GPUs to run on")
    if requested is None:
        raise GPUValidationError(f"remote=True needs accelerator_type, one of {AcceleratorType.values()}")
    if isinstance(requested, AcceleratorType):
        if requested is AcceleratorType.GPU_1xH100 and count != 1:
            raise GPUValidationError(
                f"GPU_1xH100 runs exactly 1 GPU, not {count}; use GPU_8xH100 for more "
                "(GPU_1xH100 also needs to be enabled for the workspace)"
            )
        per_node = requested.gpus_per_node or 1
        if count % per_node:
            raise GPUValidationError(
                f"{requested.value} has {per_node} GPUs per node: num_accelerators must be a multiple of "
                f"{per_node}, not {count}"
            )
        return count, requested
    if requested is GPUType.H100 and count != 1 and count % 8:
        raise GPUValidationError(f"H100 runs 1 GPU or a multiple of 8, not {count}")
    if requested is GPUType.B300 and count % 8:
        raise GPUValidationError(f"B300 runs a multiple of 8 GPUs, not {count}")
    return count, AcceleratorType.from_gpu_type(requested, count)


def resolve_local(count: Optional[int], requested: RequestedType) -> Tuple[int, Optional[AcceleratorType]]:
    """The count and shape of a run on this machine, checked against its GPUs (or CPU ranks).

    The shape is the attached one (4 of 8 H100s run as ``GPU_8xH100``); ``None`` for models the reference has
    no shape for (H200, A100, L4...), which run all the same when no type is asked for.
    """
    if compute.cpu_mode_from_environment() or requested is AcceleratorType.CPU:
        return _cpu_ranks(count, requested, remote=False)
    available = compute.attached_gpu_count()
    if importlib.util.find_spec("torch") is None:
        if available <= 0:
            raise GPUValidationError(_no_gpu_message())
        raise RuntimeConfigurationError(
            "torch is not installed, and local runs need it: pip install torch "
            f"(for this GPU host, e.g. --index-url https://download.pytorch.org/whl/{_cuda_wheel_suffix()})"
        )
    if available <= 0:
        raise GPUValidationError(_no_gpu_message())
    if count is not None and count > available:
        raise GPUValidationError(
            f"num_accelerators={count} requested, but only {available} GPU(s) are visible on this machine "
            f"(CUDA_VISIBLE_DEVICES is honoured). Pass num_accelerators between 1 and {available}, or omit it "
            "to use all of them."
        )
    count = count or available
    device = compute.attached_gpu_name() or "unknown device"
    model = compute.parse_gpu_model(device)
    attached = AcceleratorType.from_gpu_type(model, available) if model is not None else None
    if requested is None:
        return count, attached
    if model is None:
        raise GPUTypeError(
            f"accelerator_type={_shown(requested)!r} was asked for, but this machine has {device!r}, which has "
            "no accelerator type of its own. Omit accelerator_type to run on it."
        )
    assert attached is not None  # (the model is known)
    if isinstance(requested, AcceleratorType) and requested is not attached:
        raise GPUTypeError(
            f"accelerator_type={requested.value!r} does not match this machine ({available} x {device}, "
            f'accelerator_type="{attached.value}"). Pass accelerator_type="{attached.value}" or omit it.'
        )
    if isinstance(requested, GPUType) and requested is not model:
        raise GPUTypeError(
            f"gpu type {requested.value!r} does not match this machine's {device!r} ({model.value}). "
            f'Pass accelerator_type="{attached.value}" or omit it.'
        )
    return count, attached


def _no_gpu_message() -> str:
    return (
        "no GPU is attached to this machine. To run on CPU ranks over gloo instead, decorate with "
        '@distributed(accelerator_type="CPU", num_accelerators=N) or set the environment variable '
        f'{_variables.ACCELERATOR_TYPE}=CPU (then use dist.init_process_group("gloo") in the function).'
    )


def _cuda_wheel_suffix() -> str:
    version = os.environ.get("DATABRICKS_RUNTIME_VERSION", "")
    if version.startswith("client."):
        major = version.split(".")[1]
        if major.isdigit() and int(major) >= 5:
            return "cu129"
    return "cu126"


_NOTED: Set[str] = set()
"""The decoration notes already given in this process: each is given once, not at every re-run of a cell."""


def _first_time(note: str) -> bool:
    if note in _NOTED:
        return False
    _NOTED.add(note)
    return True


def decoration_notes(count: int, timeout: Any) -> None:
    """The reference's decoration-time notes, as ``logging`` records on ``databricks.air``, each once per process.

    The reference also says that a remote run ignores its timeout; here remote runs honour it, so that note is gone.
    """
    if count == 1 and _first_time("one rank"):
        logger.warning(
            "@distributed runs one rank here. It is meant for several GPUs; with one, you could call the "
            "function directly (fn.func(...))."
        )
    if timeout == DEFAULT_TIMEOUT and _first_time("default timeout"):
        logger.warning(
            "Each .distributed() call is capped at the default timeout of %d s (~%.2f h); past it the ranks "
            "are stopped and LocalExecutionTimeoutError is raised. Pass timeout=SECONDS to change the cap, "
            "or timeout=None to remove it.",
            DEFAULT_TIMEOUT,
            DEFAULT_TIMEOUT / 3600,
        )
