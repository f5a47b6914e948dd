# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=1).run(train)  # a quick check on one GPU
TorchDistributor(num_processes=8).run(train)
