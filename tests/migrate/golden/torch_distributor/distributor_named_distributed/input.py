# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor


def train(epochs):
    return epochs

# COMMAND ----------

distributed = TorchDistributor(num_processes=2)

# COMMAND ----------

distributed.run(train, 3)
