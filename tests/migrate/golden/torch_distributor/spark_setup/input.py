# Databricks notebook source
from pyspark.sql import SparkSession
from pyspark.ml.torch.distributor import TorchDistributor

spark = SparkSession.builder.appName("training").getOrCreate()
spark.conf.set("spark.task.resource.gpu.amount", "1")

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=2).run(train)
