# Databricks notebook source
from databricks.air import ray_init
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=2).run(train)
