# Databricks notebook source
from serverless_gpu.launcher import distributed
from serverless_gpu.compute import GPUType
import serverless_gpu.ray as sray

# COMMAND ----------

@distributed(gpus=8, gpu_type=GPUType.H100)
def fine_tune() -> None:
    print("fine-tuning")

# COMMAND ----------

@sray.ray_launch(gpus=4, gpu_type="a10", remote=True)
def embed() -> None:
    print("embedding")
