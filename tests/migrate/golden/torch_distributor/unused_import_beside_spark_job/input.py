# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("etl").getOrCreate()
spark.conf.set("spark.sql.shuffle.partitions", "8")

# COMMAND ----------

events = spark.read.parquet("/data/events")
events.groupBy("user").count().write.parquet("/data/counts")
