# Databricks notebook source
import serverless_gpu as sg

# COMMAND ----------

@sg.distributed(gpus=8, gpu_type="B300")
def train() -> None:
    print("training")


print(sg.__version__)
train.distributed()
