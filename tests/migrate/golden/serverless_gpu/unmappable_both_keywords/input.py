# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, num_accelerators=8, gpu_type="H100")
def train() -> None:
    print("training")
