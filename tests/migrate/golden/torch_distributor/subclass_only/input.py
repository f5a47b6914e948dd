# Databricks notebook source
from pyspark.ml.torch.distributor import TorchDistributor


class LoggingDistributor(TorchDistributor):
    """Library code: a definition, not a use."""

    def run(self, train_object, *args, **kwargs):
        print("running", train_object)
        return super().run(train_object, *args, **kwargs)
