"""One session-scoped local[2] SparkSession for every Spark test (~15 s to start)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.s3_server import CREDENTIALS


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from seglake.spark.session import get_session

    session = get_session(
        "seglake-tests",
        master="local[2]",
        quiet=True,
        conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def query_lake(spark, tmp_path_factory):
    """The lake the lookup, extract and data source tests query (several segments, every
    codec, non-monotonic timestamps), built once, and its brute-force decoding. Tests
    that damage it work on a copy."""
    from tests.spark.test_lookup import brute_force, build_lake

    root = str(tmp_path_factory.mktemp("query") / "lake")
    build_lake(spark, root)
    return root, brute_force(root)


@pytest.fixture(scope="module")
def spark_s3(spark, s3_credentials):
    """The S3 server, its credentials also in the environment of the executors' Python
    workers (``SparkContext.environment`` is sent with every Python function)."""
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update(CREDENTIALS)
    try:
        yield s3_credentials
    finally:
        env.clear()
        env.update(saved)
