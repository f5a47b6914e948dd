# Databricks notebook source
import serverless_gpu

# COMMAND ----------

@serverless_gpu.distributed(gpus=1, gpu_type="H100")
def train() -> None:
    print("training")


serverless_gpu.ray_init()
train.distributed()
