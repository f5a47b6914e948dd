"""Deprecated: use ``databricks.air.data``. Names are looked up there when first used."""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    try:
        data = importlib.import_module("databricks.air.data")
    except ModuleNotFoundError as error:
        if error.name != "databricks.air.data":
            raise
        raise AttributeError(
            f"serverless_gpu.data.{name}: databricks.air.data (datasets, DataLoader, checkpoints) is not part of "
            "this version yet"
        ) from None
    return getattr(data, name)
