# Databricks notebook source
# MAGIC %md
# MAGIC ## Train the model

# COMMAND ----------

import torch
from serverless_gpu import distributed, ray_launch  # the launchers

# COMMAND ----------

@distributed(gpus=8, gpu_type="H100")
def train(epochs: int) -> float:
    model = torch.nn.Linear(4, 1)
    return float(model.weight.sum()) * epochs


losses = train.distributed(epochs=3)

# COMMAND ----------

@ray_launch(gpus=1, gpu_type="A10")
def preprocess() -> None:
    print("done")
