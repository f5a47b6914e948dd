# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train(rows):
    return len(list(rows))

# COMMAND ----------

df = spark.read.table("training.examples")
TorchDistributor(num_processes=2, local_mode=False)._train_on_dataframe(train, df)
