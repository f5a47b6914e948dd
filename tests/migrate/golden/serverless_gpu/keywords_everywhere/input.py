# Databricks notebook source
import serverless_gpu as sg
from serverless_gpu import distributed

# COMMAND ----------

@distributed(
    gpus=8,  # one node
    gpu_type="H100",
)
def train(lr: float) -> float:
    return lr

# COMMAND ----------

def evaluate() -> None:
    print("eval")


runner = sg.distributed(gpus=1, gpu_type="A10")(evaluate)
small = train.with_overrides(gpus=1, gpu_type="H100")
small.distributed(lr=0.1)
