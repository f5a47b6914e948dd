"""What the registry holds for a run: its spec (fixed at submission) and its state (changing as it runs).

Both are dataclasses saved as JSON; reading ignores keys it does not know, so an older ``air`` reads a newer
registry and the other way round.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Type, TypeVar

from databricks.air.workloads import statuses

T = TypeVar("T")


def _from_dict(cls: Type[T], data: Dict[str, Any]) -> T:
    """An instance of ``cls`` from its JSON object; :class:`ValueError` saying what is wrong when ``data`` is not
    one (a list, a number, an object without the fields that have no default)."""
    if not isinstance(data, dict):
        raise ValueError(f"it holds a JSON {_json_kind(data)}, not an object")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    missing = [
        field.name
        for field in fields
        if field.name not in data
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"it lacks {', '.join(missing)}")
    known = {field.name for field in fields}
    return cls(**{key: value for key, value in data.items() if key in known})


def _json_kind(data: Any) -> str:
    names = {list: "list", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(data), type(data).__name__)


@dataclasses.dataclass
class NodePlan:
    """How a backend runs the workload: nodes, processes per node, and what the processes may use."""

    num_nodes: int
    local_world_size: int
    """``LOCAL_WORLD_SIZE``: accelerators (or CPU ranks) per node."""
    cpu: bool
    """CPU ranks (``accelerator_type: CPU``, or ``DATABRICKS_AIR_ACCELERATOR_TYPE=CPU``)."""
    visible_devices: Optional[str] = None
    """``CUDA_VISIBLE_DEVICES`` for the command, where the workload uses fewer GPUs than are visible."""

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.local_world_size


@dataclasses.dataclass
class RunSpec:
    """Everything the backend needs to run the workload, fixed when it is submitted (``spec.json``)."""

    run_id: int
    backend: str
    experiment_name: str
    run_name: str
    command: str
    accelerator_type: str
    num_accelerators: int
    accelerators: str
    """As people read it: ``2 x CPU``, ``GPU_8xH100``."""
    plan: Dict[str, Any]
    """A :class:`NodePlan` as a dict."""
    max_retries: int
    timeout_seconds: Optional[float]
    timeout_minutes: Optional[int]
    env_variables: Dict[str, str]
    secrets: Dict[str, str]
    """``NAME -> scope/key``: references only, never values."""
    dependencies: Optional[List[str]]
    base_dir: str
    """The workload file's folder: requirement paths are taken from there."""
    has_parameters: bool
    submit_dir: str
    """The working directory of ``air run`` (where MLflow's default store resolves, as for the user)."""
    user: str
    idempotency_key: str
    code_path: str
    """``CODE_SOURCE_PATH``: the snapshot's folder in the run's folder (an empty folder without code_source)."""
    environment_version: Optional[str] = None
    mlflow_experiment_directory: Optional[str] = None

    @property
    def node_plan(self) -> NodePlan:
        return NodePlan(**self.plan)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RunSpec":
        return _from_dict(cls, data)


@dataclasses.dataclass
class Attempt:
    """One try of the command (``attempt_number`` 0 is the first)."""

    number: int
    status: str
    started_at: float
    ended_at: Optional[float] = None
    exit_code: Optional[int] = None
    reason: Optional[str] = None
    mlflow_run_id: Optional[str] = None
    mlflow_experiment_id: Optional[str] = None
    master_port: Optional[int] = None

    @property
    def duration(self) -> float:
        return (self.ended_at or time.time()) - self.started_at


@dataclasses.dataclass
class Alert:
    """A fatal line of a node's output (first occurrence per attempt, node and pattern, with a count)."""

    attempt: int
    node: int
    line_number: int
    pattern: str
    title: str
    severity: str
    consequence: bool
    hint: str
    line: str
    count: int = 1


@dataclasses.dataclass
class RunState:
    """A run as it is now (``state.json``)."""

    run_id: int
    status: str
    submitted_at: float
    message: Optional[str] = None
    """Why the run ended, or what it is doing now (installing dependencies...)."""
    ended_at: Optional[float] = None
    attempts: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    alerts: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    owner: Dict[str, Any] = dataclasses.field(default_factory=dict)
    """Who runs it, as the backend records it (local: the supervisor's pid and start time)."""
    tracking_uri: Optional[str] = None
    environment_path: Optional[str] = None
    cancel_requested_at: Optional[float] = None

    @property
    def terminal(self) -> bool:
        return statuses.is_terminal(self.status)

    @property
    def attempt_list(self) -> List[Attempt]:
        return [_from_dict(Attempt, item) for item in self.attempts]

    @property
    def latest(self) -> Optional[Attempt]:
        return _from_dict(Attempt, self.attempts[-1]) if self.attempts else None

    @property
    def attempt_number(self) -> int:
        """Upstream's ``attempt_number``: the latest attempt's number, 0 when not retried."""
        return len(self.attempts) - 1 if self.attempts else 0

    @property
    def started_at(self) -> Optional[float]:
        return self.attempts[0]["started_at"] if self.attempts else None

    @property
    def duration(self) -> Optional[float]:
        """Seconds from the first attempt's start to the end (to now while running)."""
        start = self.started_at
        if start is None:
            return None
        return (self.ended_at or time.time()) - start

    def alert_list(self) -> List[Alert]:
        return [_from_dict(Alert, item) for item in self.alerts]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "RunState":
        return _from_dict(cls, data)
