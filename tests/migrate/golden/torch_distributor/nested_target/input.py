# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

def main():
    def train():
        return 1

    return TorchDistributor(num_processes=2).run(train)

# COMMAND ----------

main()
