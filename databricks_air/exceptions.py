"""Every error ``databricks.air`` raises.

The class names and bases follow the reference ``databricks.air.exceptions`` so that ``except`` clauses written
for it keep working. Our additions:

* :class:`DistributedExecutionError`, raised when a rank fails. It subclasses :class:`RuntimeError` (which is what
  the reference raises) and, where possible, the failing rank's own exception class too, so both
  ``except ValueError`` and ``except RuntimeError`` catch a ``ValueError`` raised in a rank.
* :class:`RankExitError`, describing a rank that died or exited without returning a value.
* :class:`LocalExecutionTimeoutError` is also a built-in :class:`TimeoutError`.

The classes whose docstring says "this package never raises it" belong to the reference's Databricks remote
workloads; they are here so that ``except`` clauses and imports written for the reference keep working.

Every class keeps its class, message and attributes through ``pickle`` (see :mod:`databricks.air._rebuildable`),
so an error raised in a rank, a Ray actor or a DataLoader worker arrives whole.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from databricks.air._rebuildable import RebuildableError

__all__ = [
    "ServerlessGpuException",
    "ServerlessGpuCustomerError",
    "ServerlessGpuInternalError",
    "WorkloadRateLimitExceededError",
    "NotebookGPULimitExceededError",
    "GPUValidationError",
    "GPUTypeError",
    "SerializationError",
    "RuntimeConfigurationError",
    "WorkspaceFileError",
    "LocalExecutionTimeoutError",
    "WorkloadCreationError",
    "WorkloadFailureException",
    "WorkloadTerminationError",
    "OutputCollectionError",
    "RayInitializationError",
    "RayConnectionError",
    "EnvironmentUploadError",
    "MissingEnvironmentError",
    "CredentialError",
    "APIError",
    "EnvironmentDownloadError",
    "CurlDownloadTimeoutError",
    "RankExitError",
    "DistributedExecutionError",
]


class ServerlessGpuException(Exception):
    """Base class of every ``databricks.air`` error."""


class ServerlessGpuCustomerError(ServerlessGpuException):
    """Something the user can fix: configuration, arguments, code that cannot be shipped to the ranks."""


class ServerlessGpuInternalError(ServerlessGpuException):
    """Something went wrong inside the runtime or its environment."""


class WorkloadRateLimitExceededError(ServerlessGpuCustomerError):
    """Too many remote workloads are active at once (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class NotebookGPULimitExceededError(ServerlessGpuCustomerError):
    """A notebook asked for more remote GPUs of one type than it may use (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class GPUValidationError(ServerlessGpuCustomerError):
    """The requested number of accelerators cannot be satisfied (none attached, too many, not an int...)."""


class GPUTypeError(ServerlessGpuCustomerError):
    """The accelerator type is unknown or does not match the attached hardware."""


class SerializationError(ServerlessGpuCustomerError):
    """The function, an argument, or a rank's return value cannot be pickled."""


class RuntimeConfigurationError(ServerlessGpuCustomerError):
    """The decorator or the call is configured in a way that cannot work."""


class WorkspaceFileError(ServerlessGpuCustomerError):
    """A workspace file could not be read or written (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class LocalExecutionTimeoutError(ServerlessGpuCustomerError, TimeoutError):
    """A local ``.distributed(...)`` call ran longer than its ``timeout``; all ranks were stopped."""


class WorkloadCreationError(ServerlessGpuInternalError):
    """A remote workload could not be created."""


class WorkloadFailureException(ServerlessGpuInternalError):
    """A remote workload failed without returning outputs (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class WorkloadTerminationError(ServerlessGpuInternalError):
    """A remote workload could not be stopped (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class OutputCollectionError(ServerlessGpuInternalError):
    """The ranks' outputs could not be collected."""


class RayInitializationError(ServerlessGpuInternalError):
    """A Ray cluster could not be started."""


class RayConnectionError(ServerlessGpuInternalError):
    """A Ray cluster could not be reached."""


class EnvironmentUploadError(ServerlessGpuInternalError):
    """The Python environment could not be shipped to remote workers (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class MissingEnvironmentError(ServerlessGpuInternalError):
    """An environment variable the runtime needs is not set."""


class CredentialError(ServerlessGpuInternalError):
    """Credentials could not be found (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class APIError(ServerlessGpuInternalError):
    """A backend API call failed (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class EnvironmentDownloadError(ServerlessGpuInternalError):
    """A worker could not download its Python environment (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class CurlDownloadTimeoutError(EnvironmentDownloadError):
    """Downloading the Python environment timed out (Databricks).

    Kept for compatibility with the reference; this package never raises it.
    """


class RankExitError(RebuildableError, RuntimeError):
    """A rank process ended without returning a value: killed by a signal, or exited on its own.

    Attributes:
        message: what happened.
        rank: the global rank (``None`` when rebuilt from its text alone).
        exit_code: the process status as :mod:`subprocess` reports it (negative for a signal; ``None``: unknown).
    """

    def __init__(self, message: str, *, rank: Optional[int] = None, exit_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.rank = rank
        self.exit_code = exit_code


class DistributedExecutionError(RebuildableError, RuntimeError):
    """One or more ranks failed.

    The instance raised by ``.distributed(...)`` is usually *also* an instance of the root-cause rank's own
    exception class (a ``ValueError`` raised in rank 1 is caught by ``except ValueError``); where that class cannot
    be rebuilt in the caller, a plain ``DistributedExecutionError`` carries the same information.

    Attributes:
        rank: the root-cause rank (the first one observed to fail).
        failures: every failed rank mapped to its exception (the rank's own exception, or a :class:`RankExitError`).
            Ranks stopped by the launcher because another rank failed are not failures.
        exit_codes: every rank's exit status (negative: killed by that signal; ``None``: unknown).
        remote_traceback: the root-cause rank's formatted traceback, if it raised.
        log_dir: the directory holding every rank's output (``rank_<r>.txt``).
    """

    rank: Optional[int]
    failures: Mapping[int, BaseException]
    exit_codes: Mapping[int, Optional[int]]
    remote_traceback: Optional[str]
    log_dir: Optional[str]
    _report: str

    def __init__(
        self,
        message: str,
        *,
        rank: Optional[int] = None,
        failures: Optional[Mapping[int, BaseException]] = None,
        exit_codes: Optional[Mapping[int, Optional[int]]] = None,
        remote_traceback: Optional[str] = None,
        log_dir: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        _set_report(self, message, rank, failures, exit_codes, remote_traceback, log_dir)

    def __str__(self) -> str:
        return self._report

    def _pickled_class(self) -> type:
        # A combined class (ValueError + DistributedExecutionError) is made at run time and cannot be pickled by
        # reference; pickling yields a plain DistributedExecutionError with the same report and attributes.
        return DistributedExecutionError

    def _constructor_argument(self, name: str) -> Any:
        return self._report if name == "message" else super()._constructor_argument(name)


def _set_report(
    error: BaseException,
    message: str,
    rank: Optional[int],
    failures: Optional[Mapping[int, BaseException]],
    exit_codes: Optional[Mapping[int, Optional[int]]],
    remote_traceback: Optional[str],
    log_dir: Optional[str],
) -> None:
    error._report = message  # type: ignore[attr-defined]
    error.rank = rank  # type: ignore[attr-defined]
    error.failures = dict(failures or {})  # type: ignore[attr-defined]
    error.exit_codes = dict(exit_codes or {})  # type: ignore[attr-defined]
    error.remote_traceback = remote_traceback  # type: ignore[attr-defined]
    error.log_dir = log_dir  # type: ignore[attr-defined]


def combine_with_rank_exception(
    original: BaseException,
    message: str,
    *,
    rank: Optional[int],
    failures: Mapping[int, BaseException],
    exit_codes: Mapping[int, Optional[int]],
    remote_traceback: Optional[str],
    log_dir: Optional[str],
) -> DistributedExecutionError:
    """Return an exception that is an instance of both ``type(original)`` and :class:`DistributedExecutionError`.

    It keeps the original's ``args`` and attributes, and its ``str()`` is ``message``. When the two classes cannot
    be combined (an incompatible layout, a final class), a plain :class:`DistributedExecutionError` is returned.
    """
    report: Dict[str, Any] = dict(
        rank=rank, failures=failures, exit_codes=exit_codes, remote_traceback=remote_traceback, log_dir=log_dir
    )
    original_type = type(original)
    if not isinstance(original, Exception) or isinstance(original, DistributedExecutionError):
        return DistributedExecutionError(message, **report)
    try:
        combined_type = type(
            original_type.__name__,
            (original_type, DistributedExecutionError),
            {
                "__module__": original_type.__module__,
                "__qualname__": original_type.__qualname__,
                "__str__": DistributedExecutionError.__str__,
                "__reduce__": RebuildableError.__reduce__,  # not the original class's: see _pickled_class
                "__init__": _keep_init,
            },
        )
        combined = combined_type.__new__(combined_type, *original.args)
        combined.args = original.args
        combined.__dict__.update(getattr(original, "__dict__", {}))
    except Exception:  # noqa: BLE001 - a class that cannot be combined: the plain error, with the same report
        return DistributedExecutionError(message, **report)
    _set_report(combined, message, **report)
    combined.__cause__ = original.__cause__
    combined.__context__ = original.__context__
    return combined


def _keep_init(self: BaseException, *args: Any, **kwargs: Any) -> None:
    # The combined instance is filled in by combine_with_rank_exception; calling __init__ again must not
    # require the keyword-only arguments of DistributedExecutionError.
    BaseException.__init__(self, *args)
