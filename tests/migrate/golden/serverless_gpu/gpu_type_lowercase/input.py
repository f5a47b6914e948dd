# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, gpu_type="h100")
def train() -> None:
    print("training")
