# Databricks notebook source
GPU_TYPE = "H100"

# COMMAND ----------

from serverless_gpu import distributed

print(f"training on {GPU_TYPE}")

# COMMAND ----------

@distributed(gpus=8, gpu_type=GPU_TYPE)
def train() -> None:
    print("training")
