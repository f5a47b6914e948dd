# Databricks notebook source
def train(epochs):
    return epochs

# COMMAND ----------

if __name__ == "__main__":
    from pyspark.ml.torch.distributor import TorchDistributor

    TorchDistributor(num_processes=2, local_mode=True, use_gpu=True).run(train, 3)
