# Databricks notebook source
import databricks.air as air
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

@air.distributed(num_accelerators=1)
def warm_up():
    return 0

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

warm_up.distributed()
TorchDistributor(num_processes=2).run(train)
