# Databricks notebook source
def train(epochs):
    return epochs

# COMMAND ----------

def main(runner=None):
    from pyspark.ml.torch.distributor import TorchDistributor

    TorchDistributor(num_processes=2).run(train, 3)
    return isinstance(runner, TorchDistributor)
