# Databricks notebook source
import pyspark.ml.torch.distributor as spark_torch
from pyspark.ml.torch.distributor import TorchDistributor as TD

# COMMAND ----------

def train():
    return 1


def evaluate():
    return 2

# COMMAND ----------

TD(num_processes=2).run(train)
spark_torch.TorchDistributor(num_processes=1).run(evaluate)
