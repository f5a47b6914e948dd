# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=1, gpu_type="H100")
def train() -> None:
    print("training")


train.distributed()
