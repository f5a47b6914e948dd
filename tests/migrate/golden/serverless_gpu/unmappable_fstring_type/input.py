# Databricks notebook source
from serverless_gpu import distributed

model = "H100"

# COMMAND ----------

@distributed(gpus=8, gpu_type=f"{model}")
def train() -> None:
    print("training")
