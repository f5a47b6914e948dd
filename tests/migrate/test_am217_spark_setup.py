"""AM217: Spark session setup is reported in files that use TorchDistributor, and never changed."""

from __future__ import annotations

from typing import List

from air_migrate.engine import migrate_file
from air_migrate.rules import REGISTRY

SESSION = (
    "Spark session setup: @distributed needs no Spark session, so this is only needed if other code here uses "
    "Spark; it is left as it is: remove it if nothing else does"
)
CONF = (
    "Spark configuration: it configures the Spark session TorchDistributor ran on, which @distributed does not "
    "use; it is left as it is: remove it if nothing else here uses Spark"
)


RUN = "TorchDistributor(num_processes=2).run(train)\n"
"""A use of TorchDistributor: without one, a file has nothing to migrate and its Spark code is not reported."""


def report(source: str, codes: str = "AM217") -> List[str]:
    rules = [REGISTRY[code] for code in codes.split(",")]
    result = migrate_file("job.py", (source + RUN).encode(), rules)
    assert result.migrated is None  # reported, never changed
    return [str(record) for record in result.records]


def test_session_builders_and_conf_settings_are_reported_however_spark_session_is_imported() -> None:
    source = (
        "import pyspark.sql as ps\n"
        "from pyspark.sql.session import SparkSession as Session\n"
        "from pyspark.ml.torch.distributor import TorchDistributor\n"
        "session = ps.SparkSession.builder.master('local[2]').config('a', 'b').getOrCreate()\n"
        "other = Session.builder.getOrCreate()\n"
        "session.conf.set('spark.task.resource.gpu.amount', '1')\n"
        "spark.conf.set('x', 'y')\n"
    )
    assert report(source) == [
        f"job.py:4:11: AM217 manual {SESSION}",
        f"job.py:5:9: AM217 manual {SESSION}",
        f"job.py:6:1: AM217 manual {CONF}",
        f"job.py:7:1: AM217 manual {CONF}",
    ]


def test_a_session_built_in_one_cell_is_followed_into_the_next() -> None:
    source = (
        "# Databricks notebook source\nfrom pyspark.sql import SparkSession\n"
        "from pyspark.ml.torch.distributor import TorchDistributor\n\n"
        "session = SparkSession.builder.getOrCreate()\n\n"
        "# COMMAND ----------\n\nsession.conf.set('a', 'b')\n"
    )
    assert report(source) == [
        f"job.py:cell 1:5:11: AM217 manual {SESSION}",
        f"job.py:cell 2:9:1: AM217 manual {CONF}",
    ]


def test_look_alikes_are_not_reported() -> None:
    source = (
        "from pyspark.ml.torch.distributor import TorchDistributor\n"
        "from my_sessions import SparkSession\n"
        "SparkSession.builder.getOrCreate()\n"
        "settings.conf.set('a', 'b')\n"
        "def configure(spark):\n    spark.conf.set('a', 'b')\n"
    )
    assert report(source) == []


def test_a_file_that_only_imports_torch_distributor_has_nothing_to_migrate() -> None:
    # An unused import beside a real Spark job: the job is no item of air-migrate's, and --check passes.
    source = (
        "from pyspark.ml.torch.distributor import TorchDistributor\nfrom pyspark.sql import SparkSession\n\n"
        "spark = SparkSession.builder.appName('etl').getOrCreate()\nspark.conf.set('a', 'b')\n"
        "spark.read.parquet('/data').write.parquet('/out')\n"
    )
    result = migrate_file("job.py", source.encode(), [REGISTRY[code] for code in sorted(REGISTRY)])
    assert result.migrated is None and result.records == []
    aliased = source.replace("import TorchDistributor", "import TorchDistributor as TD")
    assert migrate_file("job.py", aliased.encode(), [REGISTRY["AM217"]]).records == []
    used = aliased + "print(TD)\n"  # a use through an alias makes the file one to migrate
    assert len(migrate_file("job.py", used.encode(), [REGISTRY["AM217"]]).records) == 2


def test_files_without_torch_distributor_are_not_looked_at() -> None:
    source = (
        "from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\nspark.conf.set('a', 'b')\n"
    )
    result = migrate_file("job.py", source.encode(), [REGISTRY["AM217"]])
    assert not result.relevant and result.records == []


def test_a_session_built_in_two_statements_is_reported_where_it_is_created() -> None:
    source = (
        "# Databricks notebook source\nfrom pyspark.sql import SparkSession\n"
        "from pyspark.ml.torch.distributor import TorchDistributor\n\n"
        'builder = SparkSession.builder.appName("train")\n'
        'builder = builder.config("spark.task.resource.gpu.amount", "1")\n\n'
        "# COMMAND ----------\n\nspark = builder.getOrCreate()\nspark.conf.set('a', 'b')\n\n"
        "def session():\n    local = SparkSession.builder.master('local[2]')\n    return local.getOrCreate()\n\n"
        "def later():\n    return builder.getOrCreate()\n"
    )
    assert report(source) == [
        f"job.py:cell 2:10:9: AM217 manual {SESSION}",
        f"job.py:cell 2:11:1: AM217 manual {CONF}",
        f"job.py:cell 2:15:12: AM217 manual {SESSION}",
        f"job.py:cell 2:18:12: AM217 manual {SESSION}",
    ]


def test_a_variable_that_holds_something_else_is_not_a_builder() -> None:
    source = (
        "from pyspark.sql import SparkSession\nfrom pyspark.ml.torch.distributor import TorchDistributor\n"
        "builder = make_builder()\nfactory = SparkSession\nbuilder.getOrCreate()\nfactory.getOrCreate()\n"
        "def f(builder):\n    return builder.getOrCreate()\n"
    )
    assert report(source) == []
