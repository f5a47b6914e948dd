# Databricks notebook source
import torch
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train(epochs):
    return epochs

# COMMAND ----------

NUM_GPUS = torch.cuda.device_count()
TorchDistributor(num_processes=torch.cuda.device_count()).run(train, 2)
