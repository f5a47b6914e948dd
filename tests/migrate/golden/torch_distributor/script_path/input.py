# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

TorchDistributor(num_processes=2).run("/dbfs/scripts/train.py", "--epochs", "3")
