# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor
from my_project.training import train

# COMMAND ----------

TorchDistributor(num_processes=2).run(train)
