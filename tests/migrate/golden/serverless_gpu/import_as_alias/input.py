# Databricks notebook source
from serverless_gpu import distributed as run_on_gpus

# COMMAND ----------

@run_on_gpus(gpus=1, gpu_type="A10")
def evaluate() -> None:
    print("evaluating")


evaluate.distributed()
