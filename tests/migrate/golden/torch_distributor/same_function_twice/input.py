# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

distributor = TorchDistributor(num_processes=2)

# COMMAND ----------

def train(epochs):
    return epochs

# COMMAND ----------

distributor.run(train, 1)
first = TorchDistributor(2, True).run(train, 5)
