# Databricks notebook source
from serverless_gpu import distributed

settings = {"gpus": 8, "gpu_type": "H100"}

# COMMAND ----------

@distributed(**settings)
def train() -> None:
    print("training")
