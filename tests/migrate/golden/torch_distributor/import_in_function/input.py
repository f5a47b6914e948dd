# Databricks notebook source
def train(epochs):
    return epochs

# COMMAND ----------

def main():
    from pyspark.ml.torch.distributor import TorchDistributor

    distributor = TorchDistributor(num_processes=2)
    distributor.run(train, 3)

# COMMAND ----------

main()
