# Databricks notebook source
import torch.distributed as distributed
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    distributed.init_process_group("nccl")
    return distributed.get_rank()

# COMMAND ----------

TorchDistributor(num_processes=2).run(train)
