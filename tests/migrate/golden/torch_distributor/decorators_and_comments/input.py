# Databricks notebook source
import functools

from pyspark.ml.torch.distributor import TorchDistributor


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("calling", fn.__name__)
        return fn(*args, **kwargs)

    return wrapper

# COMMAND ----------

# The distributor: one process per GPU.
# (TorchDistributor needs an active Spark session.)
distributor = TorchDistributor(num_processes=2)
print("ready")

# COMMAND ----------

# Trains the model on one rank.
@logged  # keep me
def train():
    return 1

# COMMAND ----------

if __name__ == "__main__":
    distributor.run(train)
