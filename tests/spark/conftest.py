"""One session-scoped local[2] SparkSession for every Spark test (~15 s to start)."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from seglake.spark.session import get_session

    session = get_session("seglake-tests", master="local[2]", quiet=True,
                          conf={"spark.sql.shuffle.partitions": "4",
                                "spark.default.parallelism": "2"})
    yield session
    session.stop()
