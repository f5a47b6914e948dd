# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train(steps):
    import torch.distributed as dist

    dist.init_process_group("gloo")
    return dist.get_rank() * steps

# COMMAND ----------

distributor = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
result = distributor.run(train, 10)
