# Databricks notebook source
import os

if os.environ.get("DRY_RUN"):
    def train():
        return 0
else:
    from serverless_gpu import distributed

    @distributed(gpus=1, gpu_type="A10")
    def train():
        return 1

# COMMAND ----------

print(train.distributed() if hasattr(train, "distributed") else train())
