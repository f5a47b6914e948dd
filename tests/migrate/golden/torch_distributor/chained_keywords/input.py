# Databricks notebook source
import torch
from pyspark.ml.torch.distributor import TorchDistributor  # Spark's launcher

# COMMAND ----------

def train(learning_rate, epochs=3):
    import torch.distributed as dist

    dist.init_process_group("nccl")
    print(f"rank {dist.get_rank()}: lr={learning_rate}, {epochs} epochs")
    dist.destroy_process_group()

# COMMAND ----------

TorchDistributor(num_processes=8, local_mode=True, use_gpu=True).run(
    train,
    1e-3,  # learning rate
    epochs=5,
)
