# Databricks notebook source
import os

from pyspark.ml.torch.distributor import TorchDistributor

train_file = "train.py"
assert os.path.exists(train_file)

# COMMAND ----------

TorchDistributor(num_processes=2).run(train_file, "--epochs", "3")
