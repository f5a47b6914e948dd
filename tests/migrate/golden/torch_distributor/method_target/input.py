# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor


class Trainer:
    def fit(self):
        return 1

# COMMAND ----------

trainer = Trainer()
TorchDistributor(num_processes=2).run(trainer.fit)
