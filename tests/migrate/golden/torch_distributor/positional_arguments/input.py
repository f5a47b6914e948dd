# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return "trained"


def evaluate():
    return "evaluated"

# COMMAND ----------

TorchDistributor(4, True, True).run(train)
TorchDistributor().run(evaluate)  # the defaults: one process, local mode, GPUs
