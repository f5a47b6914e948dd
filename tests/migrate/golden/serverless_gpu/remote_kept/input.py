# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, gpu_type="H100", remote=True)
def train() -> None:
    print("training")


train.distributed()
