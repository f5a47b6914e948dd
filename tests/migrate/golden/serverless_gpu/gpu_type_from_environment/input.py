# Databricks notebook source
import os

from serverless_gpu import distributed

GPU_TYPE = os.environ.get("GPU_TYPE", "H100")

# COMMAND ----------

@distributed(gpus=1, gpu_type=GPU_TYPE)
def train():
    return 1
