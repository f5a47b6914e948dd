# Databricks notebook source
from serverless_gpu import distributed

NUM_GPUS = int(dbutils.widgets.get("gpus"))

# COMMAND ----------

@distributed(gpus=NUM_GPUS, gpu_type="H100")
def train() -> None:
    print("training")
