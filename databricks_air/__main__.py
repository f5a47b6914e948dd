"""``python -m databricks.air``: the ``air`` command (``run``, ``get``, ``list``, ``logs``, ``cancel``)."""

from databricks.air.workloads.cli import entry_point

if __name__ == "__main__":
    entry_point()
