# Databricks notebook source
# %%capture
from serverless_gpu import distributed

# COMMAND ----------

# COMMAND ---------- (not a separator: a comment in the cell)
@distributed(gpus=1, gpu_type="A10")
def train() -> None:
    print("training")
