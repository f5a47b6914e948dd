"""Tests of databricks.air.data (a package, so that its conftest does not shadow the top-level one)."""
