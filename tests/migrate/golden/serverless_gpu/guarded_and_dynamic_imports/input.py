# Databricks notebook source
try:
    from serverless_gpu import distributed
except ImportError:
    distributed = None

# COMMAND ----------

import importlib
import os

if os.environ.get("USE_SERVERLESS"):
    import serverless_gpu
runtime = importlib.import_module("serverless_gpu.runtime")
legacy = __import__("serverless_gpu")

# COMMAND ----------

def helper() -> str:
    """Uses serverless_gpu under the hood."""
    return "serverless_gpu"
