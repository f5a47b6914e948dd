"""What of the caller's environment travels to work on a Ray cluster: the variables of some families, and a local
MLflow store named absolutely (the work runs elsewhere, where the caller's relative paths mean nothing)."""

from __future__ import annotations

import os
from typing import Dict

FORWARDED_PREFIXES = ("MLFLOW_", "DATABRICKS_", "TORCH_", "NCCL_", "GLOO_", "ACCELERATE_")
NAMED_STORES = ("databricks", "databricks-uc")
"""MLflow tracking URIs that are names, not paths."""


def forwarded_environ(environ: Dict[str, str], cwd: str) -> Dict[str, str]:
    """The caller's variables that remote ranks get: those of :data:`FORWARDED_PREFIXES` (MLflow's run, our
    switches, accelerate's settings...), the MLflow store named absolutely."""
    forwarded = {key: value for key, value in environ.items() if key.startswith(FORWARDED_PREFIXES)}
    uri = forwarded.get("MLFLOW_TRACKING_URI")
    if uri:
        forwarded["MLFLOW_TRACKING_URI"] = absolute_store(uri, cwd)
    return forwarded


def absolute_store(uri: str, cwd: str) -> str:
    """A local MLflow store named relative to the caller's directory, named absolutely."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.join(cwd, uri[len("sqlite:///") :])
    if uri.startswith("file:") and not uri.startswith("file:/"):
        return "file:" + os.path.join(cwd, uri[len("file:") :])
    if ":" not in uri and uri not in NAMED_STORES and not os.path.isabs(uri):
        return os.path.join(cwd, uri)
    return uri
