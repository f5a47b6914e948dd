# Databricks notebook source
import torch
import torch.distributed as dist
from serverless_gpu import distributed

# COMMAND ----------

@distributed(gpus=8, gpu_type="H100")
def train(distributed: bool = True) -> int:
    if distributed:
        dist.init_process_group("nccl")
        torch.distributed.barrier()
    return dist.get_rank()

# COMMAND ----------

def describe(run):
    distributed = run.distributed
    return distributed


results = train.distributed()
