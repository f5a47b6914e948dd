# Databricks notebook source
class TorchDistributor:
    """Our own launcher, which happens to share the name."""

    def __init__(self, num_processes):
        self.num_processes = num_processes

    def run(self, fn, *args):
        return [fn(*args) for _ in range(self.num_processes)]

# COMMAND ----------

def train():
    return 1

# COMMAND ----------

TorchDistributor(2).run(train)
