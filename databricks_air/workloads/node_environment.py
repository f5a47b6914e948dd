"""The environment of a node's command: upstream's variables (``air-cli.md`` section 3), the same on every backend.

``NUM_NODES``, ``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MLFLOW_RUN_ID`` and ``MLFLOW_TRACKING_URI`` (when the attempt is tracked), ``CODE_SOURCE_PATH``, and
``HYPERPARAMETERS_PATH`` (when the workload has ``parameters``); as the runtime's entry script does, also
``MLFLOW_SYSTEM_METRICS_NODE_ID=node_<NODE_RANK>`` and a default ``NCCL_DEBUG=WARN``. ``RANK`` and ``LOCAL_RANK``
are not set: the command's own launcher (torchrun) sets them per process.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

# Variables of an outer launcher that would mislead the command's own (this process may itself run under one).
_INHERITED_NOT_PASSED = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME",
                         "MLFLOW_EXPERIMENT_ID", "TORCHELASTIC_RUN_ID", "HYPERPARAMETERS_PATH")


def node_environ(
    base: Mapping[str, str],
    *,
    num_nodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    local_world_size: int,
    code_source_path: str,
    hyperparameters_path: Optional[str],
    tracking: Optional[Mapping[str, str]],
    workload_variables: Mapping[str, str],
) -> Dict[str, str]:
    """``base`` (the submitter's environment), then the workload's ``env_variables`` and secrets, then the node's
    variables, which the runtime owns (a workload's ``MASTER_PORT`` would break rendezvous)."""
    environ = {name: value for name, value in base.items() if name not in _INHERITED_NOT_PASSED}
    environ.setdefault("NCCL_DEBUG", "WARN")
    environ.setdefault("PYTHONUNBUFFERED", "1")  # output reaches the log (and --watch) as it is printed
    environ.update(workload_variables)
    environ.update(
        {
            "NUM_NODES": str(num_nodes),
            "NODE_RANK": str(node_rank),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(num_nodes * local_world_size),
            "LOCAL_WORLD_SIZE": str(local_world_size),
            "CODE_SOURCE_PATH": code_source_path,
            "MLFLOW_SYSTEM_METRICS_NODE_ID": f"node_{node_rank}",
        }
    )
    if hyperparameters_path is not None:
        environ["HYPERPARAMETERS_PATH"] = hyperparameters_path
    if tracking:
        environ.update(tracking)
    return environ


RUNTIME_VARIABLES = ("NUM_NODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                     "CODE_SOURCE_PATH", "HYPERPARAMETERS_PATH", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI")
"""What a workload's ``env_variables`` cannot set (the runtime sets these per node)."""
