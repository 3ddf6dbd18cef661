"""One session-scoped local[2] SparkSession for every Spark test (~15 s to start)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.crash_runner import JVM_OPTIONS
from tests.s3_server import CREDENTIALS


@pytest.fixture(scope="session", autouse=True)
def short_lived_jvms() -> Iterator[None]:
    """Every Spark driver JVM the tests start (this session's, the crash and stream
    runners', spark-submit.sh's, the notebook kernel's) with ``JVM_OPTIONS`` (C1 only,
    the serial GC): ``SPARK_SUBMIT_OPTS`` is what spark-submit's launcher gives the
    driver's JVM. The session's JVM used about half the CPU so (test_datasource, _ingest,
    _stream_source, _kafka_guide, _jobs: 58 s instead of 104 s)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_SUBMIT_OPTS", os.environ.get("SPARK_SUBMIT_OPTS", JVM_OPTIONS))
        yield


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
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            # a Delta table's state (its log replayed) in 2 tasks, not 50, at every read
            "spark.databricks.delta.snapshotPartitions": "2",
        },
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
