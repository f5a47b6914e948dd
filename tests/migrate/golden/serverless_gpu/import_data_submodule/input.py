# Databricks notebook source
import serverless_gpu.data
from serverless_gpu.data import UCVolumeDataset

# COMMAND ----------

rows = UCVolumeDataset("/Volumes/main/default/rows")
reader = serverless_gpu.data.UCVolumeReader("/Volumes/main/default/other")
