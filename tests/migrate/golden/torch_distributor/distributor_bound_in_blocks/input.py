# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor


def train(epochs):
    return epochs


def evaluate(epochs):
    return epochs


def export(path):
    return path

# COMMAND ----------

if __name__ == "__main__":
    distributor = TorchDistributor(num_processes=2)
    distributor.run(train, 3)

# COMMAND ----------

try:
    distributor = TorchDistributor(num_processes=2)
    distributor.run(evaluate, 1)
except RuntimeError:
    pass

# COMMAND ----------

with open("/tmp/export.log", "w") as log:
    distributor = TorchDistributor(num_processes=1)
    distributor.run(export, "/tmp/model")
