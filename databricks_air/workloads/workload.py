"""A validated workload file, as typed values (what :mod:`.schema` produces and the backends run)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

from databricks.air.compute import AcceleratorType

DEFAULT_MAX_RETRIES = 3  # upstream's; every attempt is a full run, so most workloads want 0 (see the docs)


@dataclasses.dataclass(frozen=True)
class Compute:
    """``compute``: what the workload runs on."""

    accelerator_type: str
    """``GPU_1xA10``, ``GPU_1xH100``, ``GPU_8xH100``, ``GPU_8xB300``, or our ``CPU``."""
    num_accelerators: int
    pool_id: Optional[str] = None
    priority_class: Optional[str] = None

    @property
    def gpus_per_node(self) -> Optional[int]:
        """GPUs of one node of this type (1 or 8); ``None`` for CPU ranks."""
        return AcceleratorType(self.accelerator_type).gpus_per_node

    @property
    def nodes(self) -> int:
        """How many nodes upstream gives the workload: the count over GPUs per node (CPU ranks: one node)."""
        per_node = self.gpus_per_node
        return self.num_accelerators // per_node if per_node else 1

    @property
    def display(self) -> str:
        """``2 x GPU_8xH100 (16 GPUs)``, ``4 x CPU``, as ``list`` and ``get`` show it."""
        if self.gpus_per_node is None:
            return f"{self.num_accelerators} x CPU"
        if self.nodes == 1:
            return (
                f"{self.num_accelerators} x {self.accelerator_type}"
                if self.gpus_per_node == 1
                else self.accelerator_type
            )
        return f"{self.nodes} x {self.accelerator_type} ({self.num_accelerators} GPUs)"


@dataclasses.dataclass(frozen=True)
class ContainerImage:
    """``environment.docker_image`` (older) or ``environment.unity_catalog_image`` (current)."""

    url: str
    tag_policy: str = "auto"
    credentials_scope: Optional[str] = None
    credentials_key: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Environment:
    """``environment``: the Python packages, or a container image."""

    dependencies: Optional[Tuple[str, ...]] = None
    version: Optional[str] = None
    image: Optional[ContainerImage] = None


@dataclasses.dataclass(frozen=True)
class GitPin:
    """``code_source...git``: take the code from a commit rather than the working tree."""

    branch: Optional[str] = None
    commit: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class CodeSource:
    """``code_source``: the folder snapshotted for the run."""

    root_path: str
    """Absolute: ``~``, ``$VARS`` and ``project_root/`` expanded, relative paths taken from the file's folder."""
    include_paths: Optional[Tuple[str, ...]] = None
    git: Optional[GitPin] = None
    remote_volume: Optional[str] = None
    field: str = "code_source"
    """Where the file sets it (``code_source``, or ``code_source.snapshot`` in the older form), for messages."""


@dataclasses.dataclass(frozen=True)
class SecretRef:
    """``secrets.NAME: scope/key``."""

    scope: str
    key: str

    def __str__(self) -> str:
        return f"{self.scope}/{self.key}"


@dataclasses.dataclass(frozen=True)
class Workload:
    """A workload file that passed every rule of the schema."""

    experiment_name: str
    compute: Compute
    command: str
    environment: Environment = Environment()
    code_source: Optional[CodeSource] = None
    env_variables: Dict[str, str] = dataclasses.field(default_factory=dict)
    secrets: Dict[str, SecretRef] = dataclasses.field(default_factory=dict)
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_minutes: Optional[int] = None
    idempotency_token: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    """As read (numbers keep their text, so hyperparameters.yaml shows them as written)."""
    mlflow_run_name: Optional[str] = None
    mlflow_experiment_directory: Optional[str] = None
    mlflow_artifact_location: Optional[str] = None
    schedule: Optional[Dict[str, Any]] = None
    document: Dict[str, Any] = dataclasses.field(default_factory=dict)
    """The file's content after overrides (numbers keep their text): what is saved as the run's configuration."""
    base_dir: str = "."
    """The folder of the workload file (relative paths in it are taken from there)."""

    @property
    def run_name(self) -> str:
        """The MLflow run name: ``mlflow_run_name``, else the experiment name."""
        return self.mlflow_run_name or self.experiment_name

    @property
    def databricks_only_fields(self) -> Tuple[str, ...]:
        """The fields this file sets that only Databricks uses (permissions, policies, reserved capacity...)."""
        found = [
            name
            for name in ("permissions", "usage_policy_name", "usage_policy_id", "mlflow_artifact_location")
            if self.document.get(name) is not None
        ]
        found += [
            f"compute.{name}"
            for name in ("pool_id", "provisioned_capacity_id", "priority_class")
            if (self.document.get("compute") or {}).get(name) is not None
        ]
        return tuple(found)

    @property
    def image_field(self) -> Optional[str]:
        """``environment.docker_image`` or ``environment.unity_catalog_image``, as the file spells it, if set."""
        if self.environment.image is None:
            return None
        return (
            "unity_catalog_image"
            if "unity_catalog_image" in (self.document.get("environment") or {})
            else "docker_image"
        )
