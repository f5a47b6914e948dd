# Databricks notebook source
# MAGIC %pip install serverless_gpu torchvision==0.20.0

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=1, gpu_type="A10")
def train() -> None:
    print("training")


train.distributed()
