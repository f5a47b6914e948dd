# Databricks notebook source
from serverless_gpu import distributed
from serverless_gpu.compute import GPUType

name = "H100"
gpu_type = getattr(GPUType, name)

# COMMAND ----------

@distributed(gpus=1, gpu_type=gpu_type)
def train():
    return 1
