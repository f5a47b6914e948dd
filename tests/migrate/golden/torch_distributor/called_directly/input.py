# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train(steps):
    return steps

# COMMAND ----------

train(1)  # a dry run on the driver
TorchDistributor(num_processes=2).run(train, 100)
