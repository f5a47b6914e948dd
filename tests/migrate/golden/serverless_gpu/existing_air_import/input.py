# Databricks notebook source
from databricks.air import ray_init
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=1, gpu_type="A10")
def train() -> None:
    ray_init()


train.distributed()
