# Databricks notebook source
from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

DeepspeedTorchDistributor(numGpus=2, nnodes=1, localMode=True, useGpu=True, deepspeedConfig={}).run(train)
