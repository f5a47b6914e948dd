"""Spark's ``TorchDistributor`` to ``@distributed``: importing this package registers AM201 (with the codes it
reports, AM202 to AM216) and AM217.

A file travels through it in this order:

* :mod:`~air_migrate.rules.torch_distributor.codes`: every AM2xx code and its line for ``--list-rules``;
* :mod:`~air_migrate.rules.torch_distributor.file_scan`: before any cell is parsed, the whole file's text (restarts,
  ``%%writefile`` cells, the words worth parsing a cell for);
* :mod:`~air_migrate.rules.torch_distributor.config`: what a ``TorchDistributor(...)`` call's settings say, and
  whether they carry over to ``@distributed``;
* :mod:`~air_migrate.rules.torch_distributor.facts`: the file's bindings, uses, distributors and runs, gathered
  across cells;
* :mod:`~air_migrate.rules.torch_distributor.survey`: one cell's part of those facts;
* :mod:`~air_migrate.rules.torch_distributor.plan`: the whole file's rewrite, decided once every cell is surveyed;
* :mod:`~air_migrate.rules.torch_distributor.comments`: the comments of what the rewrite takes out, kept;
* :mod:`~air_migrate.rules.torch_distributor.rule`: AM201, which makes each cell's part of the plan;
* :mod:`~air_migrate.rules.torch_distributor.spark_setup`: AM217, Spark session setup, reported and never changed.
"""

from air_migrate.rules.torch_distributor import rule, spark_setup  # noqa: F401  (each registers its rule)
