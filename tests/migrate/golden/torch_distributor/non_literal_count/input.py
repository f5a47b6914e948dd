# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

NUM_WORKERS = 4
GPUS_PER_WORKER = 2

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=NUM_WORKERS * GPUS_PER_WORKER).run(train)
