# Databricks notebook source
# MAGIC %%writefile /dbfs/scripts/train.py
# MAGIC from pyspark.ml.torch.distributor import TorchDistributor
# MAGIC
# MAGIC
# MAGIC def main():
# MAGIC     return 1
# MAGIC
# MAGIC
# MAGIC TorchDistributor(num_processes=2).run(main)

# COMMAND ----------

from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(num_processes=2).run(train)
