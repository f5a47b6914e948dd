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

import dataclasses
import functools
import inspect
import os
import sys
import threading
import time
import types
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

from databricks.air import _log_folders as log_folders
from databricks.air import _payload, _settings, _validation, _variables, compute
from databricks.air._tracking import call_run, hosted_run, straggler_record
from databricks.air._engine import launch as engine
from databricks.air._switches import switched_on
from databricks.air.asynchronous import DistributedFunctionCall
from databricks.air.compute import AcceleratorType, GPUType, get_gpus_per_node
from databricks.air.exceptions import LocalExecutionTimeoutError, RuntimeConfigurationError
from databricks.air._notices import PREFIX, notice

__all__ = ["distributed"]

DEFAULT_TIMEOUT = _validation.DEFAULT_TIMEOUT

CPU_RANK_ENVIRON = {"ACCELERATE_USE_CPU": "true"}
"""What libraries read to run on CPU, for CPU ranks (a variable the caller set is left as it is): ``accelerate``'s
``Accelerator()`` and Hugging Face ``Trainer`` would otherwise run each rank as a training of its own on a machine
without GPUs (they look for GPUs before they look at ``WORLD_SIZE``), or train on the GPUs of one that has them."""

_UNSET: Any = object()


class DistributedFunction:
    """A function decorated with ``@distributed(...)``: run it with :meth:`distributed`.

    Attributes:
        func: the original function (call it directly to run it once in this process).
        num_accelerators: the number of ranks (``gpus`` is its old name).
        accelerator_type: the resolved :class:`AcceleratorType` (the attached shape; ``AcceleratorType.CPU`` for
            CPU ranks; ``None`` for GPU models the reference has no shape for, such as H200).
        gpu_type: the GPU model as a legacy :class:`GPUType`, where there is one.
        gpus_per_node: GPUs per node of that shape.
        remote: whether the function runs off this machine.
        timeout: seconds the whole call may take, or ``None``.
        max_restarts: how many times a failed call starts its ranks again when the failure is not the function's
            own (a rank killed, a lost peer, a machine fault); 0 by default.
        restart_on: exception classes raised by the function that restart it too.
        last_log_dir: the log folder of the latest call (``rank_<r>.txt`` per rank), ``None`` before the first.
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
        _require_callable(func)
        self._set_up(func, _validation.RankSettings.given(gpus, gpu_type, accelerator_type), remote, timeout)

    @classmethod
    def _resolved(
        cls, func: Callable[..., Any], settings: _validation.RankSettings, remote: bool, timeout: Any
    ) -> "DistributedFunction":
        """The object for settings already resolved (by :func:`build`): nothing is parsed again."""
        _require_callable(func)
        function = cls.__new__(cls)
        function._set_up(func, settings, remote, timeout)
        return function

    def _set_up(self, func: Callable[..., Any], settings: _validation.RankSettings, remote: bool, timeout: Any) -> None:
        self._settings = settings
        self.gpus = settings.count
        self.gpu_type: Optional[GPUType] = settings.gpu_type
        self.remote = remote
        self.func = func
        self.timeout = _validation.check_timeout(timeout)
        self.max_restarts = 0
        self.restart_on: Tuple[type, ...] = ()
        self.last_log_dir: Optional[str] = None
        call_run.warm_up()  # MLflow imported and its store opened in the background, before the first call

    @property
    def num_accelerators(self) -> int:
        """The number of ranks a call runs (``gpus`` is its old name)."""
        return self.gpus

    @property
    def accelerator_type(self) -> Optional[AcceleratorType]:
        """The resolved :class:`AcceleratorType`.

        The attached shape; ``AcceleratorType.CPU`` for CPU ranks; ``None`` for GPU models the reference has no
        shape for (H200, A100...).
        """
        return self._settings.shape

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the resolved shape; the number of ranks for CPU ranks or a model without a shape."""
        if self.gpu_type is not None:
            return get_gpus_per_node(self.gpu_type, self.gpus)
        return self.gpus  # CPU ranks, or a GPU model without a shape: one node

    def __repr__(self) -> str:
        shape = self.accelerator_type
        name = getattr(self.func, "__qualname__", repr(self.func))
        return (
            f"DistributedFunction(num_accelerators={self.num_accelerators}, "
            f"accelerator_type={shape.value if shape is not None else None}, remote={self.remote}, "
            f"timeout={self.timeout}, func={name})"
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
        num_accelerators: Optional[int] = None,
        accelerator_type: Any = None,
        remote: Optional[bool] = None,
        timeout: Any = _UNSET,
        *,
        gpus: Optional[int] = None,
        gpu_type: Any = None,
        max_restarts: Optional[int] = None,
        restart_on: Optional[Sequence[type]] = None,
    ) -> "DistributedFunction":
        """A copy with some settings changed; this object stays as it is.

        Omitted settings keep their values (the accelerator type keeps what was asked for, so a new count
        re-derives the shape); ``timeout=None`` removes the cap, an omitted ``timeout`` keeps it.
        """
        restarting = _validation.check_restarts(
            self.max_restarts if max_restarts is None else max_restarts,
            self.restart_on if restart_on is None else restart_on,
        )
        timeout = self.timeout if timeout is _UNSET else _validation.check_timeout(timeout)
        count, requested = _validation.normalize_names(
            num_accelerators, accelerator_type, gpus, gpu_type, "with_overrides", known_count=self.num_accelerators
        )
        count = _validation.check_count(count)
        function = build(
            self.func,
            count if count is not None else self.num_accelerators,
            requested if requested is not None else self._settings.requested,
            self.remote if remote is None else remote,
            timeout,
        )
        function.max_restarts, function.restart_on = restarting
        return function

    def distributed(self, *args: Any, **kwargs: Any) -> List[Any]:
        """Run the function once per rank and return every rank's value, indexed by global rank.

        Raises:
            TypeError: the arguments do not fit the function's signature (nothing was started).
            RuntimeConfigurationError: a variable of the environment the call reads has a wrong value (nothing
                was started, made or recorded).
            SerializationError: the function, an argument or a return value cannot be pickled.
            DistributedExecutionError: a rank failed; also an instance of that rank's exception class.
            LocalExecutionTimeoutError: the call ran past ``timeout``.
            KeyboardInterrupt: the call was interrupted; every rank was stopped.

        The traceback of an error leaves out this package's own frames (``DATABRICKS_AIR_DEBUG=1`` keeps them):
        what failed in a rank is in the error's report.
        """
        try:
            prepared = self._prepare(_bind(self.func, args, kwargs))
            call = self._handle(prepared)
            try:
                values = self._execute(call, prepared)
            except BaseException as error:
                call._finish(error=error)
                raise
            call._finish(values)
            return values
        except BaseException as error:
            if switched_on(_variables.DEBUG):
                raise
            # The frames a user reads are theirs; DATABRICKS_AIR_DEBUG=1 keeps every frame.
            raise error.with_traceback(_without_package_frames(error.__traceback__))

    def submit(self, *args: Any, **kwargs: Any) -> DistributedFunctionCall:
        """Start the call and return at once: a :class:`~databricks.air.asynchronous.DistributedFunctionCall`, a
        :class:`concurrent.futures.Future` of every rank's value (``call.result()``).

        The arguments are bound, checked and pickled here, as :meth:`distributed` does, so a bad one raises now, in
        the caller; the rest (the MLflow run, waiting for GPUs that other calls hold, the ranks) happens on a
        thread of its own. ``call.cancel()`` stops it as an interrupt would. Rank 0's output shows in the caller
        while a thread waits in ``call.result()``; all of it is in the call's log folder (``call.log_dir``).

        Example::

            calls = [train.submit(lr) for lr in (1e-4, 3e-4, 1e-3)]
            losses = [call.result()[0] for call in concurrent.futures.as_completed(calls)]
        """
        try:
            prepared = self._prepare(_bind(self.func, args, kwargs))
        except BaseException as error:
            if switched_on(_variables.DEBUG):
                raise
            raise error.with_traceback(_without_package_frames(error.__traceback__))
        call = self._handle(prepared)

        def run_in_background() -> None:
            try:
                values = self._execute(call, prepared)
            except BaseException as error:  # noqa: BLE001 - the handle carries it to result()
                call._finish(error=error)
            else:
                call._finish(values)

        call._runner = threading.Thread(target=run_in_background, name=f"databricks.air {prepared.name}", daemon=True)
        call._runner.start()
        return call

    def _prepare(self, bound: inspect.BoundArguments) -> "_Prepared":
        """Everything a call needs that can be wrong, checked in the caller before anything is printed, made or
        recorded: a bad setting or an argument that cannot be pickled is the call's only output."""
        started = time.monotonic()  # the call's clock and its timeout start here
        name = getattr(self.func, "__qualname__", "function")
        environ = dict(os.environ)
        settings = _settings.read(environ)
        calls = engine.call_class(self.remote)  # the way the ranks start: on this machine, or on a Ray cluster
        calls.check(environ, settings.start_method)
        calls.prewarm(environ)  # a local rank server imports torch while we pickle and make the run
        function_bytes = _payload.serialize_function(self.func)
        argument_bytes = _payload.serialize_arguments(self.func, bound)
        # MLflow's active run is per thread: the caller's, or the notebook's (main thread's) for a call submitted
        # from a worker thread, is the parent, taken now, on the caller's thread.
        parent = call_run.active_run_id() if settings.tracking else None
        return _Prepared(
            name, environ, settings, function_bytes, argument_bytes, _argument_params(bound), parent, started, calls
        )

    def _handle(self, prepared: "_Prepared") -> DistributedFunctionCall:
        kind = "CPU" if self.accelerator_type is AcceleratorType.CPU else "GPU"
        return DistributedFunctionCall(prepared.name, self.num_accelerators, kind)

    def _execute(self, call: DistributedFunctionCall, prepared: "_Prepared") -> List[Any]:
        """Run a prepared call (on the caller's thread for :meth:`distributed`, on its own for :meth:`submit`),
        reporting what it does to ``call``; returns every rank's value or raises what the call raises."""
        name, environ, settings = prepared.name, prepared.environ, prepared.settings
        background = call._runner is not None
        params = {**self._run_params(), **prepared.params}
        started, deadline = prepared.started, prepared.deadline(self.timeout)
        run = (
            hosted_run.open_call_run(
                name, params, parent_run_id=prepared.parent, deadline=deadline, timeout=self.timeout, started=started
            )
            if settings.tracking
            else None
        )
        call.run_id = run.run_id if run is not None else None
        status, failure, folder = "FAILED", None, None
        try:
            folder = log_folders.make(
                getattr(self.func, "__name__", "function"), settings.log_root, settings.keep_calls, settings.keep_days
            )
            log_dir = self.last_log_dir = call.log_dir = folder.path
            simulated = engine.simulated_gpus(environ) if prepared.calls.runs_here else None
            if call.kind == "CPU" or simulated is not None:
                environ.update({k: v for k, v in CPU_RANK_ENVIRON.items() if k not in environ})
            where = f" (simulated: {_variables.SIMULATE_GPUS}={simulated}, ranks run on CPUs)" if simulated else ""
            notice(
                f"running {name} on {self.num_accelerators} {call.kind} rank(s){where}; logs: "
                f"{log_dir} ({log_folders.describe_limits(settings.keep_calls, settings.keep_days)})"
            )
            if background and not _said_once.get("background"):  # once per process: a sweep submits dozens
                _said_once["background"] = True
                notice(
                    f"{name} runs in the background; a submitted call's rank 0 output shows while a "
                    "cell waits in its result(), and every rank's output is in its log folder"
                )
            if run is not None:
                run.show()
                if prepared.calls.runs_here:  # ranks elsewhere cannot reach the caller's writer: they write their own
                    run.start_metrics_writer()
                environ.update(run.environ_for_ranks(environ))
                run.start_log_uploads(log_dir, settings.log_upload_seconds)
                if prepared.calls.runs_here and settings.system_metrics:  # this node's say nothing of other machines
                    run.start_system_metrics(settings.system_metrics_seconds)
            values = self._launch(call, prepared, environ, log_dir, run)
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except BaseException as error:
            failure = error
            raise
        else:
            status = "FINISHED"
            return values
        finally:
            try:
                if run is not None:  # whatever happened, the run ends with the call
                    run.close(status, folder.path if folder is not None else None, failure)
            finally:
                if folder is not None:  # from now on another call may prune it
                    folder.release()
                    print(
                        _closing_line(
                            name, failure, status, time.monotonic() - started, call.cancelled_asked, call.stragglers
                        ),
                        file=sys.stderr,
                        flush=True,
                    )

    def _run_params(self) -> Dict[str, Any]:
        shape = self.accelerator_type
        return {
            "num_accelerators": self.num_accelerators,
            "accelerator_type": shape.value if shape is not None else "GPU",
            "timeout": self.timeout,
            "function": getattr(self.func, "__qualname__", repr(self.func)),
        }

    def _launch(
        self,
        call: DistributedFunctionCall,
        prepared: "_Prepared",
        environ: Dict[str, str],
        log_dir: str,
        run: Optional[call_run.CallRun],
    ) -> List[Any]:
        gpus: List[str] = []
        if prepared.calls.runs_here and call.kind == "GPU":  # GPUs of the call's own, leased from the node's calls
            gpus = engine.leasable_gpus(environ, compute.attached_gpu_count())

        def queued(what: str) -> None:
            call.waiting_for = what

        def started() -> None:
            call._mark_running()

        launch = engine.Launch(
            name=prepared.name,
            world_size=self.num_accelerators,
            function=prepared.function_bytes,
            arguments=prepared.argument_bytes,
            environ=environ,
            cwd=os.getcwd(),
            sys_path=list(sys.path),
            argv=list(sys.argv),
            log_dir=log_dir,
            timeout=self.timeout,
            deadline=prepared.deadline(self.timeout),
            timeout_note=_timeout_note(self.timeout),
            **prepared.settings.engine(),
            on_report=run.keep_snapshot if run is not None else None,
            hints=call_run.FAILURE_HINTS if "MLFLOW_RUN_ID" in environ else {},
            accelerator_type=self.accelerator_type,
            gpus=gpus,
            on_queued=queued,
            on_started=started,
            cancelled=call._cancel_asked,
            show_live=call._live if call._runner is not None else None,
            max_restarts=self.max_restarts,
            restart_on=self.restart_on,
            on_restart=(lambda decision: run.keep_restart(decision, log_dir)) if run is not None else None,
            on_lease=lambda devices: setattr(call, "gpus", tuple(devices)),
            on_stragglers=straggler_record.StragglerRecord(call, run),
        )
        return engine.run(launch, prepared.calls)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """A call checked in the caller and ready to run."""

    name: str
    environ: Dict[str, str]
    settings: _settings.CallSettings
    function_bytes: bytes
    argument_bytes: bytes
    params: Dict[str, str]
    """The arguments, as the run's params (``arg.<name>``)."""
    parent: Optional[str]
    """The MLflow run the call's run nests under, taken on the caller's thread."""
    started: float
    """When ``.distributed()`` or ``submit()`` was called (``time.monotonic()``): the call's clock and its timeout
    count from here, its set-up (the MLflow run, the rank server) included."""
    calls: Type[engine.Call]
    """The way its ranks start (:func:`~databricks.air._engine.launch.call_class`), chosen once: the launcher asks
    it what differs between this machine and a Ray cluster."""

    def deadline(self, timeout: Optional[float]) -> Optional[float]:
        """When the call must be over (``time.monotonic()``), or ``None`` without a timeout."""
        return None if timeout is None else self.started + timeout


_said_once: Dict[str, bool] = {}
"""Notes said once per process."""

_PARAM_VALUE_CHARS = 250


def _argument_params(bound: inspect.BoundArguments) -> Dict[str, str]:
    """The call's arguments as MLflow params (``arg.lr = 0.001``): what tells the trials of a sweep apart. A long
    value is cut (MLflow keeps at most 6000 characters; a tensor's repr says nothing useful past a line)."""
    params = {}
    for key, value in bound.arguments.items():
        text = repr(value)
        params[f"arg.{key}"] = text if len(text) <= _PARAM_VALUE_CHARS else text[: _PARAM_VALUE_CHARS - 3] + "..."
    return params


def _closing_line(
    name: str,
    failure: Optional[BaseException],
    status: str,
    seconds: float,
    cancelled: bool = False,
    stragglers: Sequence[Any] = (),
) -> str:
    """The call's last line of its own: how it ended, and after how long; and the straggler it had, if any."""
    return _ending(name, failure, status, seconds, cancelled) + "".join(
        f"; {straggler.clause()}" for straggler in {s.rank: s for s in stragglers}.values()
    )


def _ending(name: str, failure: Optional[BaseException], status: str, seconds: float, cancelled: bool) -> str:
    took = f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    if status == "FINISHED":
        return PREFIX + f"{name} finished in {took}"
    if status == "KILLED" and cancelled:
        return PREFIX + f"{name} was cancelled after {took}; every rank was stopped"
    if status == "KILLED":
        return PREFIX + f"{name} was interrupted after {took}; every rank was stopped"
    if isinstance(failure, LocalExecutionTimeoutError):
        return PREFIX + f"{name} timed out after {took}; every rank was stopped"
    return PREFIX + f"{name} failed after {took}"


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _without_package_frames(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """``tb`` without the frames of this package's files (a user's ``__reduce__`` called while pickling stays)."""
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _require_callable(func: Any) -> None:
    """A plain function: a generator's or a coroutine's value cannot come back from a rank, so such functions are
    refused here, at decoration, not after each call has made its log folder and its run."""
    if not callable(func):
        raise RuntimeConfigurationError(f"@distributed() decorates a function, not {type(func).__name__}")
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__qualname__
    short = getattr(func, "__name__", None) or "f"
    # an object whose __call__ is async or a generator counts too (inspect looks through partials, not objects)
    called = func if inspect.isroutine(func) or isinstance(func, functools.partial) else type(func).__call__
    if inspect.isasyncgenfunction(called):
        raise RuntimeConfigurationError(
            f"@distributed() cannot run {name}: it is an async generator (async def with yield), and what it "
            "gives cannot be pickled back from a rank. Decorate a plain function that collects its items and "
            f"returns them as a list: asyncio.run(collect()), with async def collect(): return [x async for x in "
            f"{short}(...)]"
        )
    if inspect.iscoroutinefunction(called):
        raise RuntimeConfigurationError(
            f"@distributed() cannot run {name}: it is an async def function, and the coroutine it gives cannot be "
            "pickled back from a rank. Decorate a plain function that runs it with asyncio.run: "
            f"def run(*args, **kwargs): return asyncio.run({short}(*args, **kwargs))"
        )
    if inspect.isgeneratorfunction(called):
        raise RuntimeConfigurationError(
            f"@distributed() cannot run {name}: it is a generator function (it uses yield), and the generator it "
            f"gives cannot be pickled back from a rank. Return a list instead: return [...] in place of the "
            f"yields, or decorate def run(*args, **kwargs): return list({short}(*args, **kwargs))"
        )


def _bind(func: Callable[..., Any], args: tuple, kwargs: Dict[str, Any]) -> inspect.BoundArguments:
    """Bind the arguments to the signature, defaults applied: a mismatch is a ``TypeError`` here, in the caller."""
    try:
        signature = inspect.signature(func)
    except ValueError:  # a builtin without a signature (time.sleep): pass the arguments as given
        signature = inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
            ]
        )
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound


def _timeout_note(timeout: Optional[float]) -> str:
    default = " (the default cap of 3 hours)" if timeout == DEFAULT_TIMEOUT else ""
    return (
        f"The limit{default} is set with @distributed(timeout=SECONDS) or .with_overrides(timeout=SECONDS); "
        "timeout=None removes it. "
    )


def build(
    func: Callable[..., Any], count: Optional[int], requested: _validation.RequestedType, remote: bool, timeout: Any
) -> DistributedFunction:
    """Resolve the settings (against this machine, or for a Ray cluster when ``remote``) and wrap ``func``."""
    if remote:
        from databricks.air._ray import require  # Ray is optional: imported for remote runs only

        require.require_ray()
    return DistributedFunction._resolved(func, _validation.resolve(count, requested, remote), remote, timeout)


def distributed(
    num_accelerators: Optional[int] = None,
    accelerator_type: Any = None,
    remote: bool = False,
    timeout: Optional[Union[int, float]] = DEFAULT_TIMEOUT,
    *,
    gpus: Optional[int] = None,
    gpu_type: Any = None,
    max_restarts: int = 0,
    restart_on: Sequence[type] = (),
) -> Callable[[Callable[..., Any]], DistributedFunction]:
    """Decorate a function so that ``fn.distributed(...)`` runs it once per accelerator of this machine.

    Args:
        num_accelerators: the number of ranks; default every visible GPU (1 in CPU mode).
        accelerator_type: an :class:`AcceleratorType` or its name (any case); optional locally, where it must
            match the attached GPUs. ``"CPU"`` runs CPU ranks over gloo (so does
            ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU``, whatever the code says).
        remote: ``True`` runs the ranks on a Ray cluster (``RAY_ADDRESS``, or the one ``ray_init`` connected
            to), one per GPU, or one per CPU with ``accelerator_type="CPU"``; ``num_accelerators`` is required.
        timeout: seconds the whole call may take (default 3 hours); ``None`` for no limit.
        gpus: deprecated name of ``num_accelerators``.
        gpu_type: deprecated name of ``accelerator_type``.
        max_restarts: how many times a failed call starts every rank again, with the same arguments and MLflow
            run, when the failure is not the function's own: a rank killed by a signal, a lost peer or rendezvous,
            a collective that timed out, a machine fault in the output (Xid, ECC, NCCL system errors). 0 (the
            default) never restarts. ``databricks.air.runtime.get_restart_count()`` says which attempt a rank is
            in, and ``databricks.air.data.Checkpointer`` resumes where the last attempt saved.
        restart_on: exception classes raised by the function that restart it as well (``(ValueError,)``).

    Settings are checked here, when the decorator runs, not at the first call.
    """
    checked_timeout = _validation.check_timeout(timeout)
    restarting = _validation.check_restarts(max_restarts, restart_on)
    count, requested = _validation.normalize_names(num_accelerators, accelerator_type, gpus, gpu_type, "@distributed")
    count = _validation.check_count(count)

    def decorate(func: Callable[..., Any]) -> DistributedFunction:
        if isinstance(func, DistributedFunction):
            raise RuntimeConfigurationError("this function is already decorated with @distributed()")
        function = build(func, count, requested, remote, checked_timeout)
        function.max_restarts, function.restart_on = restarting
        _validation.decoration_notes(function.num_accelerators, checked_timeout)
        return function

    return decorate
