# Databricks notebook source
# MAGIC %md
# MAGIC # Training with TorchDistributor

# COMMAND ----------

import os
import torch
import torch.nn as nn
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

class SimpleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(10, 1)

    def forward(self, x):
        return self.net(x)

# COMMAND ----------

# One process per GPU of the driver.
distributor = TorchDistributor(num_processes=2, local_mode=True)

# COMMAND ----------

def run_train(num_epochs: int, batch_size: int) -> float:
    import torch.distributed as dist

    dist.init_process_group("nccl")
    model = SimpleMLP().to(f"cuda:{os.environ['LOCAL_RANK']}")
    loss = 0.0
    dist.destroy_process_group()
    return loss

# COMMAND ----------

final_loss = distributor.run(run_train, num_epochs=3, batch_size=32)
print(f"loss on rank 0: {final_loss}")
