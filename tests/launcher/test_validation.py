"""The reference's decoration-time contract: validation order, errors, FutureWarnings, logging notes,
with_overrides. GPUs are simulated by replacing what NVML would report."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from typing import Any, List, Optional

import pytest

from databricks.air import _validation, compute, distributed
from databricks.air.compute import AcceleratorType, GPUType
from databricks.air.exceptions import GPUTypeError, GPUValidationError, RuntimeConfigurationError
from databricks.air.launcher import DistributedFunction


def train() -> int:
    return 1


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """Pretend this machine has ``count`` GPUs named ``name``."""

    def attach(count: int, name: Optional[str] = "NVIDIA H100 80GB HBM3") -> None:
        monkeypatch.setattr(compute, "attached_gpu_count", lambda: count)
        monkeypatch.setattr(compute, "attached_gpu_name", lambda: name)

    return attach


def _future_warnings(record: List[warnings.WarningMessage]) -> List[str]:
    return [str(w.message) for w in record if issubclass(w.category, FutureWarning)]


# --- 3.2: order ------------------------------------------------------------------------------------------------


def test_timeout_is_checked_before_anything_else(machine) -> None:
    machine(0)
    with pytest.raises(RuntimeConfigurationError, match="timeout"):
        distributed(gpus=2, num_accelerators=2, timeout=-1)  # would also be a naming error
    with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
        distributed(gpus=2, num_accelerators=2)(train)  # names before the (missing) GPUs


def test_names_are_checked_before_the_gpus(machine) -> None:
    machine(0)
    with pytest.raises(GPUTypeError):
        distributed(accelerator_type="TPU")(train)
    with pytest.raises(GPUValidationError, match="no GPU"):
        distributed(accelerator_type="GPU_8xH100")(train)


# --- 3.3: local rules ------------------------------------------------------------------------------------------


def test_count_type_and_value_errors(machine) -> None:
    machine(8)
    for bad in (2.0, "2", True):
        with pytest.raises(GPUValidationError, match="must be an int"):
            distributed(num_accelerators=bad)(train)
    for bad in (0, -1):
        with pytest.raises(GPUValidationError, match="at least 1"):
            distributed(num_accelerators=bad)(train)


def test_no_gpus_and_too_many(machine) -> None:
    machine(0)
    with pytest.raises(GPUValidationError, match="no GPU is attached"):
        distributed()(train)
    machine(4)
    with pytest.raises(GPUValidationError, match="num_accelerators=5 requested, but only 4"):
        distributed(num_accelerators=5)(train)


def test_the_count_is_checked_before_the_device_name(machine) -> None:
    machine(2, name=None)
    with pytest.raises(GPUValidationError, match="only 2"):
        distributed(num_accelerators=3, accelerator_type="GPU_8xH100")(train)


@pytest.mark.parametrize(
    "count, name, requested, expected_count, expected_shape",
    [
        (8, "NVIDIA H100 80GB HBM3", None, 8, AcceleratorType.GPU_8xH100),
        (8, "NVIDIA H100 80GB HBM3", "GPU_8xH100", 8, AcceleratorType.GPU_8xH100),
        (8, "NVIDIA H100 80GB HBM3", GPUType.H100, 8, AcceleratorType.GPU_8xH100),
        (1, "NVIDIA H100 80GB HBM3", "gpu_1xh100", 1, AcceleratorType.GPU_1xH100),
        (1, "NVIDIA A10G", AcceleratorType.GPU_1xA10, 1, AcceleratorType.GPU_1xA10),
        (2, "NVIDIA A10G", None, 2, AcceleratorType.GPU_1xA10),
        (8, "NVIDIA B300 SXM6 AC", None, 8, AcceleratorType.GPU_8xB300),
        (4, "NVIDIA H200", None, 4, None),
        (2, "NVIDIA A100-SXM4-80GB", None, 2, None),
    ],
)
def test_resolution_on_each_machine(
    machine, count: int, name: str, requested: object, expected_count: int, expected_shape: object
) -> None:
    machine(count, name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        fn = distributed(accelerator_type=requested)(train)
    assert (fn.num_accelerators, fn.accelerator_type) == (expected_count, expected_shape)


def test_a_subset_run_keeps_the_attached_shape_and_any_count_is_allowed(machine) -> None:
    machine(8)
    for count in (1, 3, 4, 7):
        fn = distributed(num_accelerators=count)(train)
        assert (fn.num_accelerators, fn.accelerator_type, fn.gpu_type) == (
            count,
            AcceleratorType.GPU_8xH100,
            GPUType.H100,
        )
    assert distributed(num_accelerators=4)(train).gpus_per_node == 8
    machine(1)
    assert distributed()(train).gpus_per_node == 1


def test_a_shape_that_does_not_match_the_machine(machine) -> None:
    machine(8)
    with pytest.raises(GPUTypeError, match=r'GPU_1xH100.*does not match.*accelerator_type="GPU_8xH100"'):
        distributed(accelerator_type="GPU_1xH100")(train)
    with pytest.raises(GPUTypeError, match="GPU_8xB300"):
        distributed(accelerator_type="GPU_8xB300")(train)


def test_a_legacy_model_that_does_not_match(machine) -> None:
    machine(8)
    with pytest.raises(GPUTypeError, match="does not match"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            distributed(gpu_type="a10")(train)


def test_a_model_without_a_shape_runs_but_refuses_an_explicit_type_naming_the_device(machine) -> None:
    machine(8, "NVIDIA H200")
    assert distributed()(train).num_accelerators == 8
    with pytest.raises(GPUTypeError, match=r"'NVIDIA H200'.*Omit accelerator_type"):
        distributed(accelerator_type="GPU_8xH100")(train)


def test_missing_torch_on_a_gpu_host_says_how_to_install_it(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a)
    )
    machine(8)
    with pytest.raises(RuntimeConfigurationError, match="pip install torch.*cu126"):
        distributed()(train)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "client.5.1")
    with pytest.raises(RuntimeConfigurationError, match="cu129"):
        distributed()(train)
    machine(0)
    with pytest.raises(GPUValidationError, match="no GPU"):
        distributed()(train)


# --- 3.4: deprecated names and values -------------------------------------------------------------------------


def test_gpus_alone_warns_once_at_the_users_line(machine) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        fn = distributed(gpus=4)(train)
    assert fn.num_accelerators == 4
    messages = _future_warnings(record)
    assert len(messages) == 1
    assert "gpus parameter is deprecated; use num_accelerators=4 in @distributed" in messages[0]
    assert messages[0].endswith("The deprecated form will be removed in AI runtime client image v7.")
    future = [w for w in record if issubclass(w.category, FutureWarning)][0]
    assert (future.filename, future.lineno) == (__file__, line)


def test_mixing_old_and_new_names_is_an_error_before_any_warning(machine) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
            distributed(gpus=8, num_accelerators=8)
        with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
            distributed(gpu_type="h100", accelerator_type="GPU_8xH100")
    assert _future_warnings(record) == []


@pytest.mark.parametrize("value", [AcceleratorType.GPU_8xH100, "GPU_8xH100", "gpu_8xh100", "CPU"])
def test_new_style_types_do_not_warn(machine, value: object) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        distributed(accelerator_type=value)(train)
    assert _future_warnings(record) == []


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"accelerator_type": "H100"}, "one of ['GPU_1xA10', 'GPU_1xH100', 'GPU_8xH100', 'GPU_8xB300']"),
        ({"accelerator_type": "H100", "num_accelerators": 1}, 'accelerator_type="GPU_1xH100"'),
        ({"accelerator_type": GPUType.H100, "num_accelerators": 8}, 'accelerator_type="GPU_8xH100"'),
        ({"accelerator_type": "a10g", "num_accelerators": 1}, 'accelerator_type="GPU_1xA10"'),
        ({"accelerator_type": "h100_80gb", "num_accelerators": 4}, 'accelerator_type="GPU_8xH100"'),
    ],
)
def test_a_legacy_value_for_accelerator_type_warns_once_with_a_suggestion(machine, kwargs: dict, expected: str) -> None:
    machine(8, "NVIDIA H100 80GB HBM3" if "a10" not in str(kwargs) else "NVIDIA A10G")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        distributed(**kwargs)(train)
    messages = _future_warnings(record)
    assert len(messages) == 1
    assert "uses a deprecated GPU type" in messages[0] and expected in messages[0]


def test_gpu_type_with_a_new_style_value_warns_about_the_name_only(machine) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fn = distributed(gpu_type="GPU_8xH100")(train)
    assert _future_warnings(record) == [
        'The gpu_type parameter is deprecated; use accelerator_type="GPU_8xH100" in @distributed instead. '
        "The deprecated form will be removed in AI runtime client image v7."
    ]
    assert fn.accelerator_type is AcceleratorType.GPU_8xH100


def test_gpu_type_with_a_legacy_value_warns_once_for_both(machine) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        distributed(gpu_type="h100", num_accelerators=8)(train)
    messages = _future_warnings(record)
    assert len(messages) == 1
    assert "gpu_type parameter and its value 'h100' are deprecated" in messages[0]
    assert 'accelerator_type="GPU_8xH100"' in messages[0]


def test_gpus_and_a_legacy_gpu_type_give_two_warnings(machine) -> None:
    machine(8)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fn = distributed(gpus=1, gpu_type=GPUType.H100)(train)
    messages = _future_warnings(record)
    assert len(messages) == 2
    assert "num_accelerators=1" in messages[0] and 'accelerator_type="GPU_1xH100"' in messages[1]
    assert fn.num_accelerators == 1


@pytest.mark.parametrize("kwargs", [{"accelerator_type": "TPU_v5"}, {"gpu_type": "a100"}, {"accelerator_type": 3}])
def test_unknown_values_list_the_accelerator_types(machine, kwargs: dict) -> None:
    machine(8)
    with pytest.raises(GPUTypeError, match=r"\['GPU_1xA10', 'GPU_1xH100', 'GPU_8xH100', 'GPU_8xB300'\]"):
        distributed(**kwargs)


def test_with_overrides_has_the_same_matrix_and_knows_the_current_count(machine) -> None:
    machine(8)
    fn = distributed(num_accelerators=1)(train)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        other = fn.with_overrides(accelerator_type="H100")
    messages = _future_warnings(record)
    assert len(messages) == 1 and 'accelerator_type="GPU_1xH100" in with_overrides' in messages[0]
    assert [w.lineno for w in record if issubclass(w.category, FutureWarning)] == [line]
    assert other.num_accelerators == 1
    with pytest.raises(RuntimeConfigurationError, match="cannot combine"):
        fn.with_overrides(gpus=2, num_accelerators=2)
    with pytest.warns(FutureWarning, match="num_accelerators=2 in with_overrides"):
        assert fn.with_overrides(gpus=2).num_accelerators == 2


# --- 3.5: with_overrides and the object ---------------------------------------------------------------------------


def test_with_overrides_keeps_what_is_not_given_and_rederives_the_shape(machine) -> None:
    machine(8)
    fn = distributed(num_accelerators=1, timeout=60)(train)
    assert fn.accelerator_type is AcceleratorType.GPU_8xH100  # the attached shape, for a subset run
    wider = fn.with_overrides(num_accelerators=8)
    assert (wider.num_accelerators, wider.accelerator_type, wider.timeout) == (8, AcceleratorType.GPU_8xH100, 60)
    assert (fn.num_accelerators, fn.timeout) == (1, 60)
    assert fn.with_overrides(timeout=None).timeout is None
    assert fn.with_overrides().timeout == 60
    remote = fn.with_overrides(remote=True, accelerator_type="GPU_8xH100", num_accelerators=8)
    assert (remote.remote, remote.num_accelerators, remote.accelerator_type) == (True, 8, AcceleratorType.GPU_8xH100)
    assert fn.remote is False


def test_the_object_constructed_directly() -> None:
    fn = DistributedFunction(4, GPUType.H100, False, train, timeout=30)
    assert fn.accelerator_type is AcceleratorType.GPU_8xH100
    assert (fn.gpus, fn.num_accelerators, fn.gpus_per_node, fn.gpu_type) == (4, 4, 8, GPUType.H100)
    assert (
        repr(fn)
        == str(fn)
        == (
            "DistributedFunction(num_accelerators=4, accelerator_type=GPU_8xH100, remote=False, timeout=30, func=train)"
        )
    )
    assert not hasattr(fn, "__name__")  # not a functools.wraps wrapper
    with pytest.raises(RuntimeConfigurationError, match="timeout"):
        DistributedFunction(4, GPUType.H100, False, train, timeout=0)


# --- remote --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"accelerator_type": "GPU_8xH100"}, "needs num_accelerators"),
        ({"num_accelerators": 8}, "needs accelerator_type"),
        ({"num_accelerators": 2, "accelerator_type": "GPU_1xH100"}, "exactly 1 GPU"),
        ({"num_accelerators": 12, "accelerator_type": "GPU_8xH100"}, "multiple of 8"),
        ({"num_accelerators": 4, "accelerator_type": "GPU_8xB300"}, "multiple of 8"),
    ],
)
def test_remote_settings_are_validated(kwargs: dict, match: str) -> None:
    with pytest.raises(GPUValidationError, match=match):
        distributed(remote=True, **kwargs)(train)


def test_remote_decoration_keeps_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    # Remote calls honour the timeout (the reference ignores it there), so decoration says nothing about it.
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        fn = distributed(num_accelerators=8, accelerator_type="GPU_8xH100", remote=True, timeout=60)(train)
    assert (fn.remote, fn.timeout) == (True, 60)
    assert not any("ignored for remote runs" in r.getMessage() for r in caplog.records)


# --- notes ---------------------------------------------------------------------------------------------------------


def test_decoration_notes_are_logging_records(
    machine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_validation, "_NOTED", set())  # as in a fresh process
    machine(8)
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        distributed(num_accelerators=1)(train)
    messages = [r.getMessage() for r in caplog.records if r.name == "databricks.air"]
    assert any("one rank" in m for m in messages)
    assert any("default timeout of 10800 s (~3.00 h)" in m and "timeout=None" in m for m in messages)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        distributed(num_accelerators=2, timeout=None)(train)
        distributed(num_accelerators=2, timeout=10)(train)
    assert [r for r in caplog.records if r.name == "databricks.air"] == []


def test_each_decoration_note_is_given_once_per_process(
    machine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A notebook cell that decorates is re-run many times: its notes are not repeated each time.
    monkeypatch.setattr(_validation, "_NOTED", set())
    machine(8)
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        for _ in range(3):
            distributed(num_accelerators=1)(train)
    messages = [r.getMessage() for r in caplog.records if r.name == "databricks.air"]
    assert sum("one rank" in m for m in messages) == 1
    assert sum("default timeout of 10800 s" in m for m in messages) == 1


def test_cpu_environment_overrides_a_gpu_type_in_code_with_a_note(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_ACCELERATOR_TYPE", "CPU")
    with caplog.at_level(logging.WARNING, logger="databricks.air"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        fn = distributed(gpus=2, gpu_type=GPUType.H100)(train)
    assert (fn.num_accelerators, fn.accelerator_type) == (2, AcceleratorType.CPU)
    assert any("running 2 CPU rank(s) instead of accelerator_type=h100_80gb" in r.getMessage() for r in caplog.records)


def test_the_beta_notice_is_logged_once_per_process_tree() -> None:
    script = (
        "import logging, os, sys; logging.basicConfig()\n"
        "import databricks.air\n"
        "import importlib; importlib.reload(databricks.air)\n"
        "print(os.environ.get('DATABRICKS_INTERNAL_BETA_WARNING_PRINTED'))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED"}
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert first.stderr.count("databricks.air is in Beta") == 1
    assert first.stdout.strip() == "1"
    again = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**env, "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED": "1"},
        check=True,
    )
    assert "Beta" not in again.stderr


@pytest.mark.parametrize("command", [["air"], [sys.executable, "-m", "databricks.air"]], ids=["air", "python -m"])
def test_our_own_commands_give_no_beta_notice(command: list, tmp_path) -> None:
    # `air list` is not a use of the Beta API: the notice is for programs that import it (a workload's script
    # says it in its own log).
    import os

    env = {k: v for k, v in os.environ.items() if k != "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED"}
    env["DATABRICKS_AIR_HOME"] = str(tmp_path)
    if command == ["air"]:
        command = [os.path.join(os.path.dirname(sys.executable), "air")]
    done = subprocess.run([*command, "list"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Beta" not in done.stdout + done.stderr
    assert done.stdout.startswith("No runs.")


@pytest.mark.parametrize("argv", ["del sys.argv", "sys.argv = []"])
def test_the_notice_works_in_an_interpreter_without_argv(argv: str) -> None:
    # An embedded interpreter may have no sys.argv, or an empty one: importing must not fail over the notice.
    import os

    env = {k: v for k, v in os.environ.items() if k != "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED"}
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; {argv}\nimport databricks.air"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("databricks.air is in Beta") == 1


# --- the settings are resolved once ----------------------------------------------------------------------------------


@pytest.mark.parametrize("remote", [False, True])
def test_decoration_parses_and_resolves_the_settings_once(
    remote: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from databricks.air import _validation

    parsed: List[Any] = []
    parse = _validation.parse_type
    monkeypatch.setattr(_validation, "parse_type", lambda value: parsed.append(value) or parse(value))
    monkeypatch.setenv("DATABRICKS_AIR_ACCELERATOR_TYPE", "CPU")
    with caplog.at_level(logging.WARNING, logger="databricks.air"):
        fn = distributed(num_accelerators=8, accelerator_type="GPU_8xH100", remote=remote)(train)
    assert parsed == ["GPU_8xH100"]
    assert (fn.num_accelerators, fn.accelerator_type, fn.remote) == (8, AcceleratorType.CPU, remote)
    notes = [r.getMessage() for r in caplog.records if "CPU rank(s)" in r.getMessage()]
    where = " on the Ray cluster" if remote else ""
    assert notes == [
        f"DATABRICKS_AIR_ACCELERATOR_TYPE=CPU: running 8 CPU rank(s){where} instead of accelerator_type=GPU_8xH100"
    ]
    assert fn.with_overrides(num_accelerators=4).num_accelerators == 4  # keeps what was asked for
