# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

distributor = TorchDistributor(num_processes=2)

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

distributor.run(train)
distributor.run("evaluate.py", "--checkpoint", "/dbfs/ckpt")
