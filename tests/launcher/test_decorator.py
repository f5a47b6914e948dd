"""The decorator and the object it returns: settings, validation, direct calls, overrides."""

from __future__ import annotations

import os

import pytest

from databricks.air import compute, distributed
from databricks.air.compute import AcceleratorType
from databricks.air.exceptions import GPUValidationError, RuntimeConfigurationError
from databricks.air.launcher import DistributedFunction


def train(epochs: int, lr: float = 0.1) -> float:
    return epochs * lr


def test_decorator_returns_a_distributed_function_with_its_settings() -> None:
    fn = distributed(num_accelerators=3, accelerator_type="CPU", timeout=60)(train)
    assert isinstance(fn, DistributedFunction)
    assert fn.func is train
    assert (fn.num_accelerators, fn.gpus, fn.accelerator_type, fn.remote, fn.timeout) == (
        3,
        3,
        AcceleratorType.CPU,
        False,
        60,
    )
    assert fn.gpus_per_node == 3
    assert repr(fn) == (
        "DistributedFunction(num_accelerators=3, accelerator_type=CPU, remote=False, timeout=60, func=train)"
    )


def test_calling_the_decorated_object_directly_says_what_to_call() -> None:
    fn = distributed(accelerator_type="CPU")(train)
    with pytest.raises(RuntimeConfigurationError, match=r"train\.distributed\(\.\.\.\).*train\.func\(\.\.\.\)"):
        fn(1)
    assert fn.func(2) == pytest.approx(0.2)


def test_with_overrides_returns_a_new_object_and_keeps_the_old_one() -> None:
    fn = distributed(num_accelerators=2, accelerator_type="CPU", timeout=30)(train)
    wider = fn.with_overrides(num_accelerators=4)
    uncapped = fn.with_overrides(timeout=None)
    assert (wider.num_accelerators, wider.timeout) == (4, 30)
    assert (uncapped.num_accelerators, uncapped.timeout) == (2, None)
    assert (fn.num_accelerators, fn.timeout) == (2, 30)


@pytest.mark.parametrize("timeout", [0, -1, True, "60", [1]])
def test_bad_timeouts_are_rejected_at_decoration(timeout: object) -> None:
    with pytest.raises(RuntimeConfigurationError, match="timeout"):
        distributed(accelerator_type="CPU", timeout=timeout)


def test_fractional_and_missing_timeouts_are_accepted() -> None:
    assert distributed(accelerator_type="CPU", timeout=1.5)(train).timeout == 1.5
    assert distributed(accelerator_type="CPU", timeout=None)(train).timeout is None
    assert distributed(accelerator_type="CPU")(train).timeout == 10800


@pytest.mark.parametrize("count", [0, -2, 1.5, True, "2"])
def test_bad_counts_are_rejected(count: object) -> None:
    with pytest.raises(GPUValidationError, match="num_accelerators"):
        distributed(num_accelerators=count, accelerator_type="CPU")


def test_cpu_mode_defaults_to_one_rank() -> None:
    assert distributed(accelerator_type="cpu")(train).num_accelerators == 1


def test_cpu_mode_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_ACCELERATOR_TYPE", "CPU")
    fn = distributed(num_accelerators=2)(train)
    assert (fn.num_accelerators, fn.accelerator_type) == (2, AcceleratorType.CPU)


def test_without_gpus_or_cpu_mode_decoration_explains_cpu_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "attached_gpu_count", lambda: 0)
    with pytest.raises(GPUValidationError, match='accelerator_type="CPU".*DATABRICKS_AIR_ACCELERATOR_TYPE=CPU'):
        distributed()(train)


def test_gpu_count_defaults_to_every_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "attached_gpu_count", lambda: 4)
    assert distributed()(train).num_accelerators == 4
    assert distributed(num_accelerators=2)(train).num_accelerators == 2


def test_asking_for_more_gpus_than_exist_names_both_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "attached_gpu_count", lambda: 4)
    with pytest.raises(GPUValidationError, match=r"num_accelerators=8 requested, but only 4 GPU"):
        distributed(num_accelerators=8)(train)


@pytest.mark.parametrize(
    "visible, total, expected",
    [
        ("0,1", 8, 2),
        ("", 8, 0),
        ("-1", 8, 0),
        ("3", 2, 0),
        ("0,5,1", 4, 1),
        ("1,1", 4, 1),
        ("GPU-aaa,GPU-bbb", 8, 2),
        ("0, 1, 2", 8, 3),
        ("abc", 8, 0),
    ],
)
def test_cuda_visible_devices_is_honoured_like_cuda_does(visible: str, total: int, expected: int) -> None:
    assert compute._count_visible(visible, total) == expected


def test_gpu_count_needs_no_cuda_on_this_machine() -> None:
    assert compute.attached_gpu_count() >= 0


def test_deprecated_names_still_work_with_a_future_warning() -> None:
    with pytest.warns(FutureWarning, match="num_accelerators=2"):
        fn = distributed(gpus=2, accelerator_type="CPU")(train)
    assert fn.num_accelerators == 2
    with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
        distributed(gpus=2, num_accelerators=2)


def test_wrong_arguments_raise_type_error_before_any_process_starts() -> None:
    import psutil

    fn = distributed(num_accelerators=2, accelerator_type="CPU")(train)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError):
        fn.distributed(1, 2, 3)
    with pytest.raises(TypeError):
        fn.distributed(epochs=1, momentum=0.9)
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


def numbers(count: int):
    yield from range(count)


async def fetch(count: int) -> int:
    return count


async def stream(count: int):
    yield count


class AsyncCallable:
    async def __call__(self) -> int:
        return 1


@pytest.mark.parametrize(
    "func, says",
    [
        (numbers, r"numbers: it is a generator function.* Return a list instead"),
        (fetch, r"fetch: it is an async def function.* asyncio\.run\(fetch\(\*args, \*\*kwargs\)\)"),
        (stream, r"stream: it is an async generator.* return \[x async for x in stream\(\.\.\.\)\]"),
        (AsyncCallable(), r"AsyncCallable: it is an async def function"),
    ],
)
def test_generators_and_coroutines_are_refused_at_decoration(func: object, says: str) -> None:
    # Their value cannot be pickled back from a rank: they used to fail in the ranks at every call, each time after
    # a log folder and an MLflow run were made.
    with pytest.raises(RuntimeConfigurationError, match=f"^@distributed\\(\\) cannot run {says}"):
        distributed(num_accelerators=2, accelerator_type="CPU")(func)
    with pytest.raises(RuntimeConfigurationError, match="cannot run"):
        DistributedFunction(2, "CPU", False, func)


def test_nan_is_refused_and_infinity_means_no_limit() -> None:
    # NaN compares false with everything, so it meant "no limit" without saying so.
    with pytest.raises(RuntimeConfigurationError, match=r"not NaN; pass timeout=None for no limit"):
        distributed(accelerator_type="CPU", timeout=float("nan"))
    with pytest.raises(RuntimeConfigurationError, match=r"not -inf; pass timeout=None"):
        distributed(accelerator_type="CPU", timeout=float("-inf"))
    assert distributed(accelerator_type="CPU", timeout=float("inf"))(train).timeout is None
    fn = distributed(accelerator_type="CPU", timeout=60)(train)
    assert fn.with_overrides(timeout=float("inf")).timeout is None
    with pytest.raises(RuntimeConfigurationError, match="NaN"):
        fn.with_overrides(timeout=float("nan"))


def test_more_cpu_ranks_than_the_machine_can_run_are_refused_naming_its_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with pytest.raises(
        GPUValidationError,
        match=(
            r"^num_accelerators=1000000000 CPU ranks is more than this machine can run: this process may use 2 CPU "
            r"core\(s\), which run at most 16 CPU ranks \(8 per core, at least 16 on any machine\).*Pass "
            r"num_accelerators between 1 and 16\.$"
        ),
    ):
        distributed(num_accelerators=10**9, accelerator_type="CPU")(train)
    assert distributed(num_accelerators=16, accelerator_type="CPU")(train).num_accelerators == 16
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    assert distributed(num_accelerators=32, accelerator_type="CPU")(train).num_accelerators == 32
    with pytest.raises(GPUValidationError, match="4 CPU core"):
        distributed(num_accelerators=2, accelerator_type="CPU")(train).with_overrides(num_accelerators=33)
