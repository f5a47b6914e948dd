# Databricks notebook source
import torch
from pyspark.ml.torch.distributor import TorchDistributor


def train(epochs):
    return epochs

# COMMAND ----------

n = torch.cuda.device_count()
TorchDistributor(num_processes=n).run(train, 3)

# COMMAND ----------

n = torch.cuda.device_count()
TorchDistributor(num_processes=n).run(train, 5)
