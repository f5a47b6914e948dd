"""Accelerator types and detection, as the reference has them."""

from __future__ import annotations

import pytest

from databricks.air.compute import (
    AcceleratorType,
    DisplayGpuType,
    GPUType,
    get_display_gpu_type,
    get_gpus_per_node,
    parse_gpu_model,
)
from databricks.air.exceptions import GPUTypeError


@pytest.mark.parametrize(
    "member, value, model, per_node",
    [
        (AcceleratorType.GPU_1xA10, "GPU_1xA10", GPUType.A10, 1),
        (AcceleratorType.GPU_1xH100, "GPU_1xH100", GPUType.H100, 1),
        (AcceleratorType.GPU_8xH100, "GPU_8xH100", GPUType.H100, 8),
        (AcceleratorType.GPU_8xB300, "GPU_8xB300", GPUType.B300, 8),
    ],
)
def test_accelerator_types(member: AcceleratorType, value: str, model: GPUType, per_node: int) -> None:
    assert member.value == value
    assert (member.gpu_type, member.gpus_per_node) == (model, per_node)
    assert AcceleratorType(value) is member
    assert AcceleratorType(value.lower()) is member and AcceleratorType(value.upper()) is member


def test_accelerator_type_values_and_cpu() -> None:
    assert AcceleratorType.values() == ["GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300"]
    assert AcceleratorType("cpu") is AcceleratorType.CPU
    assert (AcceleratorType.CPU.gpu_type, AcceleratorType.CPU.gpus_per_node) == (None, None)


@pytest.mark.parametrize("bad", ["GPU_4xH100", "h100", "", 8, None, 1.5])
def test_unknown_accelerator_types_list_the_valid_ones(bad: object) -> None:
    with pytest.raises(GPUTypeError, match=r"GPU_1xA10.*GPU_8xB300"):
        AcceleratorType(bad)


@pytest.mark.parametrize(
    "model, count, expected",
    [
        (GPUType.H100, 1, AcceleratorType.GPU_1xH100),
        (GPUType.H100, 2, AcceleratorType.GPU_8xH100),
        (GPUType.H100, 8, AcceleratorType.GPU_8xH100),
        (GPUType.H100, 16, AcceleratorType.GPU_8xH100),
        (GPUType.A10, 1, AcceleratorType.GPU_1xA10),
        (GPUType.A10, 4, AcceleratorType.GPU_1xA10),
        (GPUType.B300, 1, AcceleratorType.GPU_8xB300),
        (GPUType.B300, 8, AcceleratorType.GPU_8xB300),
    ],
)
def test_from_gpu_type(model: GPUType, count: int, expected: AcceleratorType) -> None:
    assert AcceleratorType.from_gpu_type(model, count) is expected


@pytest.mark.parametrize(
    "text, member",
    [
        ("H100", GPUType.H100),
        ("h100", GPUType.H100),
        ("h100_80gb", GPUType.H100),
        ("H100_80GB", GPUType.H100),
        ("a10", GPUType.A10),
        ("A10", GPUType.A10),
        ("A10G", GPUType.A10),
        ("a10g", GPUType.A10),
        ("B300", GPUType.B300),
        ("b300", GPUType.B300),
    ],
)
def test_gpu_type_parsing(text: str, member: GPUType) -> None:
    assert GPUType(text) is member


def test_gpu_type_lists_and_errors() -> None:
    assert GPUType.values() == ["h100_80gb", "a10", "b300"]
    assert GPUType.names() == ["h100", "a10", "b300"]
    with pytest.raises(GPUTypeError, match=r"\['h100', 'a10', 'b300'\]"):
        GPUType("a100")


@pytest.mark.parametrize(
    "model, gpus, per_node, display",
    [
        (GPUType.H100, 1, 1, "1xH100"),
        (GPUType.H100, 8, 8, "8xH100"),
        (GPUType.H100, None, 8, "8xH100"),
        (GPUType.H100, 4, 8, "8xH100"),
        (GPUType.A10, 1, 1, "A10"),
        (GPUType.A10, 3, 1, "A10"),
        (GPUType.B300, 8, 8, "8xB300"),
        (GPUType.B300, 1, 8, "8xB300"),
    ],
)
def test_helpers(model: GPUType, gpus: int, per_node: int, display: str) -> None:
    assert get_gpus_per_node(model, gpus) == per_node
    assert get_gpus_per_node(model.value, gpus) == per_node
    assert get_display_gpu_type(model, gpus) == display


def test_display_gpu_type_enum() -> None:
    assert [(m.name, m.value) for m in DisplayGpuType] == [("a10", "A10"), ("h100_80gb", "8xH100"), ("b300", "8xB300")]


@pytest.mark.parametrize(
    "name, model",
    [
        ("NVIDIA H100 80GB HBM3", GPUType.H100),
        ("NVIDIA H100 NVL", GPUType.H100),
        ("NVIDIA H100", GPUType.H100),
        ("NVIDIA A10G", GPUType.A10),
        ("NVIDIA A10-24Q", GPUType.A10),
        ("NVIDIA A10", GPUType.A10),
        ("NVIDIA B300 SXM6 AC", GPUType.B300),
        ("NVIDIA H200", None),
        ("NVIDIA A100-SXM4-80GB", None),
        ("NVIDIA GB300", None),
        ("NVIDIA L4", None),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_detecting_the_model_from_real_device_names(name: str, model: GPUType) -> None:
    assert parse_gpu_model(name) is model
