# Databricks notebook source
from serverless_gpu import *

# COMMAND ----------

@distributed(gpus=1, gpu_type="A10")
def train() -> None:
    print("training")


train.distributed()
