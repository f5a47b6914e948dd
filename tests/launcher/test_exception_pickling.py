"""Every exception class the project defines keeps its class, message and attributes across processes.

The classes are found by walking the packages, so a class added later is checked without editing this file. Three
ways across a process boundary are checked: ``pickle`` and ``cloudpickle`` (ranks, Ray actors, DCP's gathers), and
torch's DataLoader re-raise, which rebuilds a worker's exception from its class and its text alone.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from types import ModuleType
from typing import Any, Dict, List

import cloudpickle
import pytest
from torch.utils.data._utils import ExceptionWrapper

import air_migrate
import databricks.air

# A value for each constructor parameter name the project's exception classes use. A new class with a parameter
# not listed here fails `test_every_constructor_parameter_has_a_sample` until one is added.
SAMPLES: Dict[str, Any] = {
    "message": "what went wrong, and what to do",
    "path": "/Volumes/main/default/data/part-0003.bin",
    "offset": 4096,
    "rank": 1,
    "exit_code": -9,
    "failures": {1: ValueError("boom")},
    "exit_codes": {0: -15, 1: 1},
    "remote_traceback": 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: boom\n',
    "log_dir": "/tmp/databricks-air-logs/call",
    "problem": "must be a positive integer",
    "run_id": 7,
    "field": "parameters.lr",
    "reason": "an alias (*base) on line 3: write the value out",
    "mark": None,
}


def _modules(package: ModuleType) -> List[ModuleType]:
    found = [package]
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # running it is what importing it does
            continue
        found.append(importlib.import_module(info.name))
    return found


def _exception_classes() -> List[type]:
    classes = {}
    for package in (databricks.air, air_migrate):
        for module in _modules(package):
            for value in vars(module).values():
                if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                    classes[f"{value.__module__}.{value.__qualname__}"] = value
    return [classes[name] for name in sorted(classes)]


CLASSES = _exception_classes()
IDS = [f"{cls.__module__}.{cls.__qualname__}" for cls in CLASSES]


def _parameters(cls: type) -> List[inspect.Parameter]:
    if cls.__init__ is BaseException.__init__ or cls.__init__ is OSError.__init__:
        return []
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _instance(cls: type) -> BaseException:
    parameters = _parameters(cls)
    if not parameters:
        return cls(SAMPLES["message"])
    positional = [SAMPLES[p.name] for p in parameters if p.kind is p.POSITIONAL_ONLY]
    keywords = {p.name: SAMPLES[p.name] for p in parameters if p.kind is not p.POSITIONAL_ONLY}
    return cls(*positional, **keywords)


def _comparable(value: Any) -> Any:
    """Exceptions compare by identity: compare them (also inside containers) by class, text and attributes."""
    if isinstance(value, BaseException):
        return (type(value), str(value), _public_state(value))
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_comparable(item) for item in value)
    return value


def _public_state(error: BaseException) -> Dict[str, Any]:
    state = {key: _comparable(value) for key, value in vars(error).items() if not key.startswith("_")}
    state["args"] = _comparable(error.args)
    if isinstance(error, OSError):
        state.update(errno=error.errno, strerror=error.strerror, filename=error.filename)
    return state


def test_the_walk_finds_the_classes_that_travel_between_processes() -> None:
    names = set(IDS)
    assert {
        "databricks.air.exceptions.RankExitError",
        "databricks.air.exceptions.DistributedExecutionError",
        "databricks.air.data.errors.CorruptCheckpointError",
        "databricks.air.data.errors.DataFileVanishedError",
        "air_migrate.sources.SourceError",
    } <= names
    assert len(CLASSES) >= 30  # the walk reached every module, not just the package roots


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_every_constructor_parameter_has_a_sample(cls: type) -> None:
    missing = [p.name for p in _parameters(cls) if p.name not in SAMPLES]
    assert not missing, f"add a sample value for {missing} to SAMPLES in {__file__}"


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_round_trip_keeps_class_text_and_attributes(cls: type, dumps: Any) -> None:
    error = _instance(cls)
    error.add_note("a note added after construction")
    copy = pickle.loads(dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert _public_state(copy) == _public_state(error)
    assert copy.__notes__ == ["a note added after construction"]


@pytest.mark.parametrize("cls", CLASSES, ids=IDS)
def test_a_dataloader_worker_error_is_re_raised_as_its_own_class(cls: type) -> None:
    # What torch's DataLoader does with an exception raised in a worker: only the class and the text travel,
    # and the main process calls cls(text) (or raises a RuntimeError when that fails).
    try:
        raise _instance(cls)
    except BaseException:  # noqa: BLE001
        wrapper = ExceptionWrapper(where="in DataLoader worker process 0")
    wrapper = pickle.loads(pickle.dumps(wrapper))
    with pytest.raises(BaseException) as caught:
        wrapper.reraise()
    assert type(caught.value) is cls
    assert SAMPLES["message"] in str(caught.value) or cls.__name__ in str(caught.value)
