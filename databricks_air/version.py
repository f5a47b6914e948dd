"""The package version (read by packaging metadata and by ``databricks.air.__version__``)."""

__version__ = "0.1.0"
