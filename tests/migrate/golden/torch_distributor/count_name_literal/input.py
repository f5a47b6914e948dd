# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

N = 2
NODES = 4  # not a count of ranks here


def train(epochs):
    return epochs

# COMMAND ----------

TorchDistributor(num_processes=N).run(train, 3)
