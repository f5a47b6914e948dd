# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, gpu_type="h100")
def train() -> None:
    print("training")


@distributed(gpus=2, gpu_type='a10g')
def evaluate() -> None:
    print("evaluating")
