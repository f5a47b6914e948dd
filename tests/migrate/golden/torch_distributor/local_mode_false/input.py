# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=16, local_mode=False, use_gpu=True).run(train)
