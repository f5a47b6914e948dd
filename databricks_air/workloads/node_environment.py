"""The environment of a node's command: upstream's variables (``air-cli.md`` section 3), the same on every backend.

``NUM_NODES``, ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MLFLOW_RUN_ID`` and ``MLFLOW_TRACKING_URI`` (when the attempt is tracked), ``CODE_SOURCE_PATH``, and
``HYPERPARAMETERS_PATH`` (when the workload has ``parameters``); as the runtime's entry script does, also
``MLFLOW_SYSTEM_METRICS_NODE_ID=node_<NODE_RANK>`` and a default ``NCCL_DEBUG=WARN``. ``RANK`` and ``LOCAL_RANK``
are not set: the command's own launcher (torchrun) sets them per process.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Dict, Mapping, Optional

# Variables of an outer launcher that would mislead the command's own (this process may itself run under one).
_INHERITED_NOT_PASSED = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "MLFLOW_RUN_ID",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_EXPERIMENT_ID",
    "TORCHELASTIC_RUN_ID",
    "HYPERPARAMETERS_PATH",
)


@dataclasses.dataclass(frozen=True)
class NodeVariables:
    """What the runtime sets for one node's command (upstream's variables), apart from what it is set on."""

    num_nodes: int
    node_rank: int
    master_addr: str
    master_port: int
    local_world_size: int
    code_source_path: str
    hyperparameters_path: Optional[str]
    tracking: Optional[Mapping[str, str]]
    """``MLFLOW_RUN_ID``, ``MLFLOW_TRACKING_URI``... of the attempt's MLflow run (``None``: not tracked)."""
    workload_variables: Mapping[str, str]
    """The workload's ``env_variables`` and secrets."""
    device_variables: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """``CUDA_VISIBLE_DEVICES`` where the runtime chooses the node's devices (CPU ranks: none)."""
    checkpoint_dir: Optional[str] = None
    """``AIR_CHECKPOINT_DIR``: the run's folder for checkpoints, the same in every attempt (a workload's own
    ``env_variables`` may name another, shared by every node of a cluster)."""

    def relocated(self, old_root: str, new_root: str) -> "NodeVariables":
        """The same variables on a node where the run's files are under ``new_root`` rather than ``old_root`` (each
        node of a cluster has its own copy of them)."""

        def move(path: Optional[str]) -> Optional[str]:
            if path is None or not (path == old_root or path.startswith(old_root.rstrip(os.sep) + os.sep)):
                return path
            return new_root + path[len(old_root) :]

        return dataclasses.replace(
            self,
            code_source_path=move(self.code_source_path) or self.code_source_path,
            hyperparameters_path=move(self.hyperparameters_path),
            checkpoint_dir=move(self.checkpoint_dir),
        )

    def environ(self, base: Mapping[str, str]) -> Dict[str, str]:
        """``base`` (the submitter's environment, or the node's), then the workload's ``env_variables`` and
        secrets, then the node's variables, which the runtime owns (a workload's ``MASTER_PORT`` would break
        rendezvous)."""
        environ = {name: value for name, value in base.items() if name not in _INHERITED_NOT_PASSED}
        environ.setdefault("NCCL_DEBUG", "WARN")
        environ.setdefault("PYTHONUNBUFFERED", "1")  # output reaches the log (and --watch) as it is printed
        environ.update(self.device_variables)
        environ.update(self.workload_variables)
        environ.update(
            {
                "NUM_NODES": str(self.num_nodes),
                "NODE_RANK": str(self.node_rank),
                "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port),
                "WORLD_SIZE": str(self.num_nodes * self.local_world_size),
                "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "CODE_SOURCE_PATH": self.code_source_path,
                "MLFLOW_SYSTEM_METRICS_NODE_ID": f"node_{self.node_rank}",
            }
        )
        if self.hyperparameters_path is not None:
            environ["HYPERPARAMETERS_PATH"] = self.hyperparameters_path
        if self.checkpoint_dir is not None and CHECKPOINT_DIR_VARIABLE not in self.workload_variables:
            environ[CHECKPOINT_DIR_VARIABLE] = self.checkpoint_dir
        if self.tracking:
            environ.update(self.tracking)
        return environ


def with_interpreter_on_path(environ: Mapping[str, str]) -> Dict[str, str]:
    """``environ`` with this interpreter's folder first on ``PATH``: the command's ``python``, ``pip`` and
    ``torchrun`` are those of the environment air runs in, even when it is not activated (a venv's ``bin/air``
    started by its path), as the runtime's environment is on Databricks."""
    copy = dict(environ)
    here = os.path.dirname(sys.executable)
    if here not in copy.get("PATH", "").split(os.pathsep):
        copy["PATH"] = os.pathsep.join(filter(None, [here, copy.get("PATH", "")]))
    return copy


CHECKPOINT_DIR_VARIABLE = "AIR_CHECKPOINT_DIR"
"""Where ``databricks.air.data.Checkpointer()`` keeps checkpoints when given no folder."""

RUNTIME_VARIABLES = (
    "NUM_NODES",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "CODE_SOURCE_PATH",
    "HYPERPARAMETERS_PATH",
    "MLFLOW_RUN_ID",
    "MLFLOW_TRACKING_URI",
)
"""What a workload's ``env_variables`` cannot set (the runtime sets these per node)."""
