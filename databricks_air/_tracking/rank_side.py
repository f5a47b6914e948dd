"""The rank side of tracking: what a rank logs with ``mlflow`` lands in the call's run, fast, and none of it is lost.

The caller (:meth:`databricks.air._tracking.call_run.CallRun.environ_for_ranks`) names this module as a rank hook
(:mod:`databricks.air._engine.rank_hooks`), so the engine calls :func:`rank_started` before the function and
:func:`rank_ending` when the rank ends: after the function returned or raised, and when the launcher stops the
rank with SIGTERM (another rank failed, the timeout, an interrupt).

In the rank, once MLflow is imported (never imported here just for this: it costs seconds where the rank server
has not preloaded it):

* **The call's run is the run.** ``MLFLOW_RUN_ID`` stays set. A top-level ``mlflow.start_run()``, and the run
  that any fluent call starts implicitly (in any thread), is the call's run, also after it was ended; starting it
  while it is active returns it again instead of failing. Ending it (``mlflow.end_run()``, a ``with
  mlflow.start_run():`` block, HF ``Trainer``'s callback, MLflow's own exit handler, ``MlflowClient.set_terminated``)
  only flushes what was logged and detaches it: the rank never ends the call's run, the call does (FINISHED,
  FAILED or KILLED). Nested runs (``start_run(nested=True)`` under an active run) and other runs work as in MLflow.
  Lightning's ``MLFlowLogger`` does not use the fluent API (it makes a run of its own with ``MlflowClient``, in
  experiment ``lightning_logs``): one made without ``run_id`` and ``experiment_name`` is given the call's run.
* **Per-step metrics cost microseconds.** ``mlflow.log_metric`` and ``mlflow.log_metrics`` into the call's run
  are queued in the rank and handed to the call's writer every ``MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS`` (which
  the caller sets to 1 unless the user chose; :mod:`databricks.air._tracking.rank_buffer` says why MLflow's own
  asynchronous queue is not enough, :mod:`databricks.air._tracking.writer` why the caller writes): a synchronous
  call is a store transaction (about 5-20 ms with SQLite, a network round trip with a server), and every rank
  writing one per step into one SQLite file spends most of the step waiting on its lock. The metric is validated
  first, so bad input still raises at the call, as it would synchronously. Metrics for another run, a model or a
  dataset take MLflow's asynchronous path. Params and tags stay synchronous (a conflicting param value must fail
  where it is logged, not spoil a batch of metrics later). A user who sets ``MLFLOW_ENABLE_ASYNC_LOGGING`` either
  way, or passes ``synchronous=``, gets MLflow's own behaviour.
* **Nothing logged is lost.** :func:`rank_ending` flushes the rank's queue, then MLflow's (metrics, params, tags;
  artifacts logged asynchronously) before the rank exits or dies, so the call ends its run only after every rank's
  logging is in.
  A batch that SQLite refuses because another writer holds the file's lock is written again, not dropped.
"""

from __future__ import annotations

import base64
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any, Callable, Optional, Sequence

from databricks.air import _variables
from databricks.air._tracking import rank_buffer
from databricks.air._notices import notice

_RUN_ID = "MLFLOW_RUN_ID"
_EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
_ASYNC_LOGGING = "MLFLOW_ENABLE_ASYNC_LOGGING"

_call_run_id: Optional[str] = None
_call_experiment_id: Optional[str] = None  # read at the start: mlflow.set_experiment() in the rank changes the variable
_pid = os.getpid()


def rank_started() -> None:
    """Bind this rank's MLflow to the call's run (now if MLflow is loaded, else as soon as it is imported)."""
    global _call_run_id, _call_experiment_id, _pid
    _pid = os.getpid()
    _call_run_id = os.environ.get(_RUN_ID) or None
    _call_experiment_id = os.environ.get(_EXPERIMENT_ID) or None
    if _call_run_id is None:
        return  # tracking is off for this call
    if "mlflow.tracking.fluent" in sys.modules:
        _bind_or_say(sys.modules["mlflow"])
    else:
        sys.meta_path.insert(0, _AfterImport("mlflow", _bind_or_say))
    for name in LIGHTNING_LOGGER_MODULES:
        if name in sys.modules:
            _bind_lightning(sys.modules[name])
        else:
            sys.meta_path.insert(0, _AfterImport(name, _bind_lightning))


def rank_ending() -> None:
    """Write what MLflow still holds for this rank: metrics, params and tags queued for asynchronous logging, and
    artifacts being uploaded asynchronously."""
    if _call_run_id is None or "mlflow.tracking.fluent" not in sys.modules:
        return
    from mlflow import tracking

    _flush_metrics(final=True)
    _write_queued(sys.modules["mlflow.tracking.fluent"])
    repository = tracking._get_artifact_repo(_call_run_id)  # the run's cached repository, if artifacts were logged
    if repository is not None and hasattr(repository, "flush_async_logging"):
        repository.flush_async_logging()


def _write_queued(fluent: types.ModuleType) -> None:
    """Wait until MLflow has written what its asynchronous queue holds (it starts again at the next logging call),
    as MLflow's ``end_run`` does."""
    shut_down = getattr(fluent, "_shut_down_async_logging", None) or fluent.flush_async_logging
    shut_down()


# --- binding MLflow's fluent API to the call's run ------------------------------------------------------------------


def _bind_or_say(mlflow: types.ModuleType) -> None:
    try:
        _bind(mlflow)
    except Exception as error:  # noqa: BLE001 - an MLflow we do not know: logging still works, unguarded
        notice(f"this rank's MLflow calls are not bound to the call's run ({error!r})")


def _bind(mlflow: types.ModuleType) -> None:
    """Wrap the fluent functions that decide which run is active, and the metric loggers (see the module docstring)."""
    from mlflow.tracking import fluent

    if getattr(fluent.start_run, "_databricks_air", False):
        return
    for name, wrap in (
        ("start_run", _start_run),
        ("end_run", _end_run),
        ("log_metric", _log_metric),
        ("log_metrics", _log_metrics),
    ):
        wrapped = wrap(getattr(fluent, name), fluent)
        wrapped._databricks_air = True  # type: ignore[attr-defined]
        setattr(fluent, name, wrapped)  # what fluent itself calls (ActiveRun.__exit__, atexit, implicit starts)
        setattr(mlflow, name, wrapped)
    mlflow.MlflowClient.set_terminated = _set_terminated(mlflow.MlflowClient.set_terminated)
    _flush_with_the_stores()
    _retry_locked_batches()


def _call_run_active(stack: Sequence[Any]) -> bool:
    """Whether the thread's run stack holds only the call's run (or nothing)."""
    return all(run.info.run_id == _call_run_id for run in stack)


def _start_run(original: Callable[..., Any], fluent: types.ModuleType) -> Callable[..., Any]:
    @functools.wraps(original)
    def start_run(
        run_id: Optional[str] = None,
        experiment_id: Optional[str] = None,
        run_name: Optional[str] = None,
        nested: bool = False,
        parent_run_id: Optional[str] = None,
        tags: Optional[dict] = None,
        description: Optional[str] = None,
        log_system_metrics: Optional[bool] = None,
    ) -> Any:
        stack = fluent._active_run_stack.get()
        other = dict(experiment_id=experiment_id, parent_run_id=parent_run_id, log_system_metrics=log_system_metrics)
        if run_id not in (None, _call_run_id) or parent_run_id is not None or (nested and stack):
            # Another run, or a child of the active one: MLflow's own, without resuming ours from MLFLOW_RUN_ID.
            hidden = os.environ.pop(_RUN_ID, None)
            try:
                return original(run_id, run_name=run_name, nested=nested, tags=tags, description=description, **other)
            finally:
                if hidden is not None:
                    os.environ[_RUN_ID] = hidden
        if not _call_run_active(stack):
            return original(run_id, run_name=run_name, nested=nested, tags=tags, description=description, **other)
        if not stack and _mlflow_must_resume(fluent, log_system_metrics):
            return original(_call_run_id, run_name=run_name, tags=tags, description=description, **other)
        # The call's run, as MLflow resumes it for MLFLOW_RUN_ID, but without using up the variable, and without
        # writing RUNNING again into a run that is running (a store write per rank and call).
        run = stack[-1] if stack else _snapshot() or fluent.MlflowClient().get_run(_call_run_id)
        _update_run(fluent, run_name, tags, description)
        stack.append(fluent.ActiveRun(run))
        return stack[-1]

    return start_run


def _snapshot() -> Any:
    """The call's run as the caller created it (reading it back costs a rank a tenth of a second of SQL)."""
    encoded = os.environ.get(_variables.RUN_SNAPSHOT)
    if not encoded:
        return None
    from mlflow.entities import Run
    from mlflow.protos.service_pb2 import Run as RunProto

    run = Run.from_proto(RunProto.FromString(base64.b64decode(encoded)))
    return run if run.info.run_id == _call_run_id else None


def _mlflow_must_resume(fluent: types.ModuleType, log_system_metrics: Optional[bool]) -> bool:
    """Whether only MLflow's own resume does what is asked: system metrics for the run, or the check that fails a
    function that chose another experiment (``mlflow.set_experiment`` in the rank)."""
    from mlflow.environment_variables import MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING

    if log_system_metrics or (log_system_metrics is None and MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING.get()):
        return True
    chosen = getattr(fluent, "_active_experiment_id", None)
    return chosen is not None and chosen != _call_experiment_id


def _update_run(
    fluent: types.ModuleType, name: Optional[str], tags: Optional[dict], description: Optional[str]
) -> None:
    """What ``start_run(run_id=...)`` changes on a resumed run: its name, tags and description."""
    tags = dict(tags or {})
    if description:
        tags["mlflow.note.content"] = description
    client = fluent.MlflowClient()
    if tags:
        from mlflow.entities import RunTag

        client.log_batch(_call_run_id, tags=[RunTag(key, str(value)) for key, value in tags.items()])
    if name:
        client.update_run(_call_run_id, name=name)


def _end_run(original: Callable[..., Any], fluent: types.ModuleType) -> Callable[..., Any]:
    @functools.wraps(original)
    def end_run(status: str = "FINISHED") -> None:
        stack = fluent._active_run_stack.get()
        if stack and stack[-1].info.run_id == _call_run_id:
            stack.pop()  # detached; the next fluent call resumes it
            _write_queued(fluent)  # what MLflow's end_run guarantees: what was logged is written
            return
        try:
            original(status)
        finally:
            assert _call_run_id is not None  # (bound only in a rank of a call with a run)
            os.environ[_RUN_ID] = _call_run_id  # MLflow's end_run unsets it, whichever run it ends

    return end_run


def _set_terminated(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_terminated(self: Any, run_id: str, status: Optional[str] = None, end_time: Optional[int] = None) -> None:
        if run_id == _call_run_id:
            self._tracking_client.store.flush_async_logging()  # the call ends its run, with the call's status
            return None
        original(self, run_id, status, end_time)

    return set_terminated


# --- Lightning's MLFlowLogger -----------------------------------------------------------------------------------------

LIGHTNING_LOGGER_MODULES = ("pytorch_lightning.loggers.mlflow", "lightning.pytorch.loggers.mlflow")
"""Where Lightning defines ``MLFlowLogger`` (the ``pytorch_lightning`` package, and the ``lightning`` one)."""


def _bind_lightning(module: types.ModuleType) -> None:
    """Make ``MLFlowLogger()`` log into the call's run: a logger made without ``run_id`` and ``experiment_name``
    (by default it makes a run of its own in experiment ``lightning_logs``, through ``MlflowClient``, which
    ``MLFLOW_RUN_ID`` does not steer) is given ``run_id=<the call's run>``. One made with either is left as asked."""
    logger = getattr(module, "MLFlowLogger", None)
    original = getattr(logger, "__init__", None)
    if original is None or getattr(original, "_databricks_air", False):
        return
    import inspect

    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return
    if "run_id" not in signature.parameters or "experiment_name" not in signature.parameters:
        return  # a Lightning we do not know

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            given = signature.bind(self, *args, **kwargs).arguments
        except TypeError:
            given = {}  # the original says what is wrong
        if _call_run_id and given and given.get("run_id") is None and "experiment_name" not in given:
            kwargs["run_id"] = _call_run_id
        original(self, *args, **kwargs)

    __init__._databricks_air = True  # type: ignore[attr-defined]
    setattr(logger, "__init__", __init__)


# --- metrics, batched ------------------------------------------------------------------------------------------------

_metrics: Optional[rank_buffer.MetricBuffer] = None  # the call's run's points, once one was logged


def _batched() -> bool:
    """Whether fluent metrics are batched by our choice (the user made none)."""
    return _ASYNC_LOGGING not in os.environ


def _buffer(fluent: types.ModuleType) -> rank_buffer.MetricBuffer:
    global _metrics
    if _metrics is None or _metrics.run_id != _call_run_id:

        def write_here(run_id: str, metrics: list, now: bool = True) -> None:
            if metrics:
                fluent.MlflowClient().log_batch(run_id, metrics=metrics, synchronous=True)

        address = os.environ.get(_variables.METRICS_ADDRESS)
        write = write_here
        if address:  # the caller writes (writer.py says why); a rank that cannot reach it writes here
            from databricks.air._tracking.wire import RankSender

            write = RankSender(address, os.environ.get(_variables.METRICS_KEY, ""), write_here)
        assert _call_run_id is not None  # (metrics are buffered only in a rank of a call with a run)
        _metrics = rank_buffer.MetricBuffer(_call_run_id, write)
    return _metrics


def _flush_metrics(*, final: bool = False) -> None:
    if _metrics is not None:
        _metrics.flush(final=final)


def _for_the_calls_run(fluent: types.ModuleType, run_id: Optional[str], model_id: Any, dataset: Any, step: int) -> bool:
    """Whether a fluent metric goes to the call's run and nowhere else (no model, no dataset, no other run): only
    such points are buffered; the rest take MLflow's own asynchronous path."""
    if run_id is not None or model_id is not None or dataset is not None or os.getpid() != _pid:
        return False  # (a forked child, a DataLoader worker: it never runs rank_ending, so MLflow's queue it is)
    run = fluent._get_or_start_run()
    if run.info.run_id != _call_run_id or fluent.get_active_model_id() is not None:
        return False
    outputs = run.outputs.model_outputs if run.outputs else None  # a model logged at this step gets the metric too
    return not outputs or all(output.step != step for output in outputs)


def _log_metric(original: Callable[..., Any], fluent: types.ModuleType) -> Callable[..., Any]:
    from mlflow.entities import Metric
    from mlflow.tracking.metric_value_conversion_utils import convert_metric_value_to_float_if_possible
    from mlflow.utils.async_logging.run_operations import RunOperations
    from mlflow.utils.time import get_current_time_millis

    @functools.wraps(original)
    def log_metric(
        key: str,
        value: float,
        step: Optional[int] = None,
        synchronous: Optional[bool] = None,
        timestamp: Optional[int] = None,
        run_id: Optional[str] = None,
        model_id: Optional[str] = None,
        dataset: Any = None,
        **more: Any,
    ) -> Any:
        if synchronous is None and _batched():
            value = convert_metric_value_to_float_if_possible(value)
            timestamp = timestamp or get_current_time_millis()
            _validate(key, value, timestamp, step or 0)  # bad input raises here, as it would synchronously
            if not more and _for_the_calls_run(fluent, run_id, model_id, dataset, step or 0):
                return RunOperations([_buffer(fluent).add(Metric(key, value, timestamp, step or 0))])
            synchronous = False
        return original(key, value, step, synchronous, timestamp, run_id, model_id, dataset, **more)

    return log_metric


def _log_metrics(original: Callable[..., Any], fluent: types.ModuleType) -> Callable[..., Any]:
    from mlflow.entities import Metric
    from mlflow.utils.async_logging.run_operations import RunOperations
    from mlflow.utils.time import get_current_time_millis

    @functools.wraps(original)
    def log_metrics(
        metrics: dict,
        step: Optional[int] = None,
        synchronous: Optional[bool] = None,
        run_id: Optional[str] = None,
        timestamp: Optional[int] = None,
        model_id: Optional[str] = None,
        dataset: Any = None,
        **more: Any,
    ) -> Any:
        if synchronous is None and _batched():
            timestamp = timestamp or get_current_time_millis()
            for key, value in metrics.items():
                _validate(key, value, timestamp, step or 0)
            if not more and _for_the_calls_run(fluent, run_id, model_id, dataset, step or 0):
                buffer = _buffer(fluent)
                futures = [buffer.add(Metric(key, value, timestamp, step or 0)) for key, value in metrics.items()]
                return RunOperations(futures[-1:])  # one batch's future: the last point's batch is the latest
            synchronous = False
        return original(metrics, step, synchronous, run_id, timestamp, model_id, dataset, **more)

    return log_metrics


_valid_names: set = set()  # names seen valid: a name's check (a regular expression, a path check) runs once


def _validate(key: str, value: Any, timestamp: int, step: int) -> None:
    """MLflow's check of one metric, as the synchronous path runs it, with each name checked once."""
    from mlflow.utils.validation import _validate_metric

    if key in _valid_names and isinstance(value, float) and isinstance(step, int) and timestamp >= 0:
        return
    _validate_metric(key, value, timestamp, step)
    if isinstance(key, str):
        _valid_names.add(key)


def _flush_with_the_stores() -> None:
    """Make MLflow's own flushes (``mlflow.flush_async_logging()``, ``end_run``, the store's shut-down) write the
    buffered points first."""
    from mlflow.store.tracking.abstract_store import AbstractStore

    for name in ("flush_async_logging", "shut_down_async_logging"):
        original = getattr(AbstractStore, name)
        if getattr(original, "_databricks_air", False):
            continue

        def flushing(self: Any, *args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            _flush_metrics()
            return _original(self, *args, **kwargs)

        functools.update_wrapper(flushing, original)
        flushing._databricks_air = True  # type: ignore[attr-defined]
        setattr(AbstractStore, name, flushing)


def _retry_locked_batches() -> None:
    """Make the stores' asynchronous writers try a batch again while SQLite says the database is locked
    (:func:`databricks.air._tracking.rank_buffer.write_locked_again`): MLflow's async queue logs a failed batch and
    drops it.
    """
    from mlflow.store.tracking.abstract_store import AbstractStore

    original = AbstractStore.log_batch_async
    if getattr(original, "_databricks_air", False):
        return

    @functools.wraps(original)
    def log_batch_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        queue = getattr(self, "_async_logging_queue", None)
        write = getattr(queue, "_logging_func", None)  # MLflow's queue calls it once per batch, in its threads
        if queue is not None and write is not None and not getattr(write, "_databricks_air", False):
            queue._logging_func = _retrying(write)
        return original(self, *args, **kwargs)

    log_batch_async._databricks_air = True  # type: ignore[attr-defined]
    AbstractStore.log_batch_async = log_batch_async  # type: ignore[method-assign]  # (patched on purpose)


def _retrying(write: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(write)
    def write_batch(*args: Any, **kwargs: Any) -> Any:
        return rank_buffer.write_locked_again(lambda: write(*args, **kwargs))

    write_batch._databricks_air = True  # type: ignore[attr-defined]
    return write_batch


# --- after MLflow is imported ----------------------------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(module)`` once the module ``name`` has been imported (by whoever imports it first).

    Only an import runs it: looking the module up (``importlib.util.find_spec``, as libraries do to see whether
    MLflow is installed) leaves this finder in place for the import that may follow.
    """

    def __init__(self, name: str, then: Callable[[types.ModuleType], None]) -> None:
        self._name = name
        self._then = then
        self._finding = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if name != self._name or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)  # the real finders (this one declines while it asks)
        finally:
            self._finding = False
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then(module: types.ModuleType) -> None:
            del loader.exec_module  # this spec's own loader object: back to its class's method
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            exec_module(module)
            self._then(module)

        loader.exec_module = exec_then  # type: ignore[method-assign]
        return spec
