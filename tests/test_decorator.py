"""The decorator and the object it returns: settings, validation, direct calls, overrides."""

from __future__ import annotations

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
    assert (fn.num_accelerators, fn.gpus, fn.accelerator_type, fn.remote, fn.timeout) == (3, 3, AcceleratorType.CPU, False, 60)
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
    [("0,1", 8, 2), ("", 8, 0), ("-1", 8, 0), ("3", 2, 0), ("0,5,1", 4, 1), ("1,1", 4, 1),
     ("GPU-aaa,GPU-bbb", 8, 2), ("0, 1, 2", 8, 3), ("abc", 8, 0)],
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
