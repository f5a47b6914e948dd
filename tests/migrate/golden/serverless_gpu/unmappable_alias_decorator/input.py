# Databricks notebook source
from serverless_gpu import distributed

# COMMAND ----------

on_h100 = distributed(gpus=8, gpu_type="H100")


@on_h100
def train() -> None:
    print("training")
