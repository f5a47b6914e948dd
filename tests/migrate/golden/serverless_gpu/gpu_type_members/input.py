# Databricks notebook source
from serverless_gpu import distributed
from serverless_gpu.compute import GPUType

# COMMAND ----------

@distributed(gpus=8, gpu_type=GPUType.H100)
def train() -> None:
    print("training")

# COMMAND ----------

@distributed(gpus=1, gpu_type=GPUType.A10)
def evaluate() -> None:
    print("evaluating")


train.distributed()
evaluate.distributed()
