"""The exception hierarchy, as the reference has it, and our additions."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Set

import pytest

from databricks.air import exceptions as e

HIERARCHY = [
    (e.ServerlessGpuException, Exception),
    (e.ServerlessGpuCustomerError, e.ServerlessGpuException),
    (e.ServerlessGpuInternalError, e.ServerlessGpuException),
    (e.WorkloadRateLimitExceededError, e.ServerlessGpuCustomerError),
    (e.NotebookGPULimitExceededError, e.ServerlessGpuCustomerError),
    (e.GPUValidationError, e.ServerlessGpuCustomerError),
    (e.GPUTypeError, e.ServerlessGpuCustomerError),
    (e.SerializationError, e.ServerlessGpuCustomerError),
    (e.RuntimeConfigurationError, e.ServerlessGpuCustomerError),
    (e.WorkspaceFileError, e.ServerlessGpuCustomerError),
    (e.LocalExecutionTimeoutError, e.ServerlessGpuCustomerError),
    (e.WorkloadCreationError, e.ServerlessGpuInternalError),
    (e.WorkloadFailureException, e.ServerlessGpuInternalError),
    (e.WorkloadTerminationError, e.ServerlessGpuInternalError),
    (e.OutputCollectionError, e.ServerlessGpuInternalError),
    (e.RayInitializationError, e.ServerlessGpuInternalError),
    (e.RayConnectionError, e.ServerlessGpuInternalError),
    (e.EnvironmentUploadError, e.ServerlessGpuInternalError),
    (e.MissingEnvironmentError, e.ServerlessGpuInternalError),
    (e.CredentialError, e.ServerlessGpuInternalError),
    (e.APIError, e.ServerlessGpuInternalError),
    (e.EnvironmentDownloadError, e.ServerlessGpuInternalError),
    (e.CurlDownloadTimeoutError, e.EnvironmentDownloadError),
]


@pytest.mark.parametrize("cls, base", HIERARCHY, ids=[c.__name__ for c, _ in HIERARCHY])
def test_reference_hierarchy(cls: type, base: type) -> None:
    assert base in cls.__bases__
    assert cls.__name__ in e.__all__


@pytest.mark.parametrize("cls", [c for c, _ in HIERARCHY if c is not e.LocalExecutionTimeoutError])
def test_reference_classes_are_not_builtin_value_type_or_timeout_errors(cls: type) -> None:
    assert not issubclass(cls, (ValueError, TypeError, TimeoutError))


def test_our_additions() -> None:
    assert issubclass(e.LocalExecutionTimeoutError, TimeoutError)
    assert issubclass(e.DistributedExecutionError, RuntimeError)
    assert issubclass(e.RankExitError, RuntimeError)


def test_a_combined_rank_exception_is_both_classes() -> None:
    combined = e.combine_with_rank_exception(
        KeyError("k"), "report", rank=1, failures={}, exit_codes={0: 0, 1: 1}, remote_traceback=None, log_dir=None
    )
    assert isinstance(combined, KeyError) and isinstance(combined, e.DistributedExecutionError)
    assert str(combined) == "report" and combined.args == ("k",) and combined.rank == 1


# --- classes kept only for compatibility ---------------------------------------------------------------------------

COMPATIBILITY_ONLY = "this package never raises it"
PACKAGE = Path(e.__file__).resolve().parent


def _constructed_or_raised() -> Set[str]:
    """Names of our exception classes that the package's code calls or raises, anywhere."""
    names = set(e.__all__)
    found: Set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            target = node.func if isinstance(node, ast.Call) else node.exc if isinstance(node, ast.Raise) else None
            name = getattr(target, "id", None) or getattr(target, "attr", None)
            if name in names:
                found.add(name)
    return found


def test_classes_never_raised_here_say_so_and_the_others_do_not() -> None:
    used = [getattr(e, name) for name in _constructed_or_raised()]
    raised = {name for name in e.__all__ if any(issubclass(cls, getattr(e, name)) for cls in used)}
    marked = {name for name in e.__all__ if COMPATIBILITY_ONLY in (inspect.getdoc(getattr(e, name)) or "")}
    assert marked == set(e.__all__) - raised
    assert {"WorkloadFailureException", "CredentialError", "APIError"} <= marked  # the audit sees them
