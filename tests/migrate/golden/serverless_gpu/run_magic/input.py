# Databricks notebook source
# MAGIC %run ./setup_serverless

# COMMAND ----------

@distributed(gpus=1, gpu_type="A10")
def train() -> None:
    print("training")
