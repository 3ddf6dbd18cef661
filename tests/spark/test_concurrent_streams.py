"""Several ``readStream.format("seglake")`` queries of one driver started together (issue
31, 4): each query's source runs in a Python worker the JVM starts and gives 10 s to
connect back; on a loaded machine four of them importing pyspark from ``pyspark.zip``
(compiled at every start) missed it. A local session's workers import the installed
pyspark instead (``session.worker_python``)."""

from __future__ import annotations

import pyarrow as pa
import pyspark
import pytest

import seglake.spark
from seglake.sample import generate
from seglake.spark.ingest import ingest

pytestmark = pytest.mark.spark
TOPICS = ("c1", "c2", "c3", "c4")


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    seglake.spark.register(spark)


def test_python_workers_import_the_installed_pyspark_not_the_zip(spark):
    files = spark.sparkContext.parallelize([0], 1).map(lambda _: pyspark.__file__).collect()
    assert ".zip" not in files[0] and files[0] == pyspark.__file__


def test_four_streams_started_together_read_what_the_batch_source_reads(spark, tmp_path):
    root = str(tmp_path / "lake")
    # 120 records a topic: three micro-batches each at maxOffsetsPerTrigger 50
    msgs = pa.concat_tables(generate(120, seed=31 + i, topics=(t,)) for i, t in enumerate(TOPICS))
    ingest(spark, spark.createDataFrame(msgs), root, num_partitions=2)
    queries = []
    for topic in TOPICS:
        df = (
            spark.readStream.format("seglake")
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "50")
            .load(root)
        )
        writer = df.writeStream.format("memory").queryName(f"concurrent_{topic}")
        writer = writer.option("checkpointLocation", str(tmp_path / "cp" / topic))
        queries.append(writer.trigger(availableNow=True).start())
    try:
        for q in queries:
            q.awaitTermination(300)
            assert q.exception() is None
    finally:
        for q in queries:
            q.stop()
    cols = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType"]
    for topic in TOPICS:
        streamed = spark.table(f"concurrent_{topic}").select(cols).collect()
        batch = spark.read.format("seglake").option("subscribe", topic).load(root).select(cols)
        assert sorted(map(tuple, streamed)) == sorted(map(tuple, batch.collect()))
        assert len(streamed) > 50  # more than one micro-batch each
