# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return 1


def launch(distributor, fn):
    return distributor.run(fn)

# COMMAND ----------

distributor = TorchDistributor(num_processes=2)
distributor.run(train)
launch(distributor, train)
