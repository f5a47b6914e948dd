# Databricks notebook source
import serverless_gpu.data
from serverless_gpu.data import load_dataset

# COMMAND ----------

rows = load_dataset("/Volumes/main/default/rows")
other = serverless_gpu.data.load_dataset("/Volumes/main/default/other")
