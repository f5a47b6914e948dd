# Databricks notebook source
# Settings for the run.
NUM_GPUS = 8
GPU_TYPE = "H100"

# COMMAND ----------

from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=NUM_GPUS, gpu_type=GPU_TYPE)
def train() -> None:
    print("training")
