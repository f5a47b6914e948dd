# Databricks notebook source
import torch
from pyspark.ml.torch.distributor import TorchDistributor

# COMMAND ----------

# MAGIC %pip install torchmetrics==1.4.0

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

import torchmetrics


def train():
    return torchmetrics.__version__

# COMMAND ----------

from pyspark.ml.torch.distributor import TorchDistributor

TorchDistributor(num_processes=2).run(train)
