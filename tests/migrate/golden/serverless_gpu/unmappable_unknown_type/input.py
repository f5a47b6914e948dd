# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, gpu_type="H200")
def train() -> None:
    print("training")
