"""Spark's Kafka integration guide (docs/streaming/structured-streaming-kafka-integration.md,
Spark 4.x) run against a lake: every Python example's option map, copied verbatim below
with the section and the comment it comes from, with ``format("kafka")`` ->
``format("seglake")`` and the lake's path; ``kafka.bootstrap.servers`` stays (ignored).
Two additions are Spark's, not seglake's: ``.mode("append")`` on a batch write (Spark
refuses its default ``errorifexists`` for any Python data source) and a stream sink's
``checkpointLocation`` (the guide's examples leave it to the session conf).

And a job written for ``format("kafka")`` (a batch read, a batch write, a stream read, a
stream write) run on a lake by changing only the format and the path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import seglake.spark
from seglake.spark.ingest import ingest

pytestmark = pytest.mark.spark

SERVERS = "host1:port1,host2:port2"
SIZES = {("topic1", 0): 80, ("topic1", 1): 40, ("topic2", 0): 30}

# "Creating a Kafka Source for Streaming Queries": (comment, options, selectExpr)
STREAM_SOURCE = [
    (
        "Subscribe to 1 topic",
        {"kafka.bootstrap.servers": "host1:port1,host2:port2", "subscribe": "topic1"},
        ("CAST(key AS STRING)", "CAST(value AS STRING)"),
    ),
    (
        "Subscribe to 1 topic, with headers",
        {
            "kafka.bootstrap.servers": "host1:port1,host2:port2",
            "subscribe": "topic1",
            "includeHeaders": "true",
        },
        ("CAST(key AS STRING)", "CAST(value AS STRING)", "headers"),
    ),
    (
        "Subscribe to multiple topics",
        {"kafka.bootstrap.servers": "host1:port1,host2:port2", "subscribe": "topic1,topic2"},
        ("CAST(key AS STRING)", "CAST(value AS STRING)"),
    ),
    (
        "Subscribe to a pattern",
        {"kafka.bootstrap.servers": "host1:port1,host2:port2", "subscribePattern": "topic.*"},
        ("CAST(key AS STRING)", "CAST(value AS STRING)"),
    ),
]
# "Creating a Kafka Source for Batch Queries": (comment, options, rows read)
BATCH_SOURCE = [
    (
        "Subscribe to 1 topic defaults to the earliest and latest offsets",
        {"kafka.bootstrap.servers": "host1:port1,host2:port2", "subscribe": "topic1"},
        80 + 40,
    ),
    (
        "Subscribe to multiple topics, specifying explicit Kafka offsets",
        {
            "kafka.bootstrap.servers": "host1:port1,host2:port2",
            "subscribe": "topic1,topic2",
            "startingOffsets": """{"topic1":{"0":23,"1":-2},"topic2":{"0":-2}}""",
            "endingOffsets": """{"topic1":{"0":50,"1":-1},"topic2":{"0":-1}}""",
        },
        (50 - 23) + 40 + 30,
    ),
    (
        "Subscribe to a pattern, at the earliest and latest offsets",
        {
            "kafka.bootstrap.servers": "host1:port1,host2:port2",
            "subscribePattern": "topic.*",
            "startingOffsets": "earliest",
            "endingOffsets": "latest",
        },
        80 + 40 + 30,
    ),
]
# "Creating a Kafka Sink for Streaming Queries" and "Writing the output of Batch Queries
# to Kafka" (the same two): (comment, selectExpr, options)
SINK = [
    (
        "Write key-value data from a DataFrame to a specific Kafka topic specified in an option",
        ("CAST(key AS STRING)", "CAST(value AS STRING)"),
        {"kafka.bootstrap.servers": "host1:port1,host2:port2", "topic": "topic1"},
    ),
    (
        "Write key-value data from a DataFrame to Kafka using a topic specified in the data",
        ("topic", "CAST(key AS STRING)", "CAST(value AS STRING)"),
        {"kafka.bootstrap.servers": "host1:port1,host2:port2"},
    ),
]


def _append(spark, root: str, sizes: dict[tuple[str, int], int], tag: str = "") -> None:
    rows = [
        (t, p, f"k{p}-{i}".encode(), f"{t}-{p}-{i}{tag}".encode())
        for (t, p), n in sizes.items()
        for i in range(n)
    ]
    df = spark.createDataFrame(rows, "topic string, partition int, key binary, value binary")
    ingest(spark, df, root)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> str:
    seglake.spark.register(spark)
    root = str(tmp_path_factory.mktemp("guide") / "lake")
    _append(spark, root, SIZES)
    return root


def _values(spark, root: str, topic: str = "topic1") -> list[tuple[str, str]]:
    df = spark.read.format("seglake").option("subscribe", topic).load(root)
    return sorted(
        tuple(r) for r in df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect()
    )


@pytest.mark.parametrize(
    ("comment", "options", "rows"), BATCH_SOURCE, ids=[c for c, *_ in BATCH_SOURCE]
)
def test_batch_source_examples(spark, lake, comment, options, rows):
    df = spark.read.format("seglake").options(**options).load(lake)
    assert df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").count() == rows


def test_stream_source_examples(spark, lake, tmp_path):
    """The four streams started together (at the latest offsets, the guide's default),
    then records appended: each stream reads the new records of its topics."""
    root = str(tmp_path / "lake")
    shutil.copytree(lake, root)
    queries = []
    for i, (_, options, columns) in enumerate(STREAM_SOURCE):
        df = spark.readStream.format("seglake").options(**options).load(root)
        q = (
            df.selectExpr(*columns)
            .writeStream.format("memory")
            .queryName(f"guide_stream_{i}")
            .option("checkpointLocation", str(tmp_path / f"cp{i}"))
            .start()
        )
        q.processAllAvailable()
        queries.append(q)
    _append(spark, root, {("topic1", 0): 5, ("topic1", 1): 3, ("topic2", 0): 4}, tag="new")
    try:
        for q in queries:
            q.processAllAvailable()
    finally:
        for q in queries:
            q.stop()
    counts = [spark.table(f"guide_stream_{i}").count() for i in range(len(STREAM_SOURCE))]
    assert counts == [8, 8, 12, 12]
    assert "headers" in spark.table("guide_stream_1").columns
    assert spark.table("guide_stream_0").where("value NOT LIKE '%new'").count() == 0


@pytest.mark.parametrize(("comment", "columns", "options"), SINK, ids=["option", "column"])
def test_batch_sink_examples(spark, lake, tmp_path, comment, columns, options):
    out = str(tmp_path / "out")
    df = spark.read.format("seglake").option("subscribe", "topic1").load(lake)
    df.selectExpr(*columns).write.format("seglake").options(**options).mode("append").save(out)
    assert _values(spark, out) == _values(spark, lake)


def test_stream_sink_examples(spark, lake, tmp_path):
    for i, (_, columns, options) in enumerate(SINK):
        out = str(tmp_path / f"out{i}")
        df = (
            spark.readStream.format("seglake")
            .option("subscribe", "topic1")
            .option("startingOffsets", "earliest")
            .load(lake)
        )
        ds = (
            df.selectExpr(*columns)
            .writeStream.format("seglake")
            .options(**options)
            .option("checkpointLocation", str(tmp_path / f"cp{i}"))
            .start(out)
        )
        ds.processAllAvailable()
        ds.stop()
        assert _values(spark, out) == _values(spark, lake)


# A job as written for Spark's Kafka connector; the test changes the format and the path.
KAFKA_JOB = """
orders = (spark.read.format("kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "topic1")
          .option("startingOffsets", "earliest")
          .option("endingOffsets", "latest")
          .option("minPartitions", "4")
          .option("includeHeaders", "true")
          .load())
(orders.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "headers")
       .write.format("kafka")
       .option("kafka.bootstrap.servers", "broker:9092")
       .option("kafka.compression.type", "lz4")
       .option("topic", "copied")
       .mode("append")
       .save())
stream = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", "broker:9092")
          .option("subscribe", "topic1")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "50")
          .option("maxTriggerDelay", "1d")
          .option("groupIdPrefix", "archive-job")
          .option("kafkaConsumer.pollTimeoutMs", "512")
          .option("includeHeaders", "true")
          .load())
query = (stream.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "headers")
         .writeStream.format("kafka")
         .option("kafka.bootstrap.servers", "broker:9092")
         .option("kafka.acks", "all")
         .option("kafka.partitioner.class", "org.example.ShardPartitioner")
         .option("topic", "streamed")
         .option("checkpointLocation", checkpoint)
         .start())
query.processAllAvailable()
query.stop()
"""


def for_lake(job: str, root: str) -> str:
    """``job`` with only the format and the path changed."""
    out = job.replace('format("kafka")', 'format("seglake")')
    for call in (".load()", ".save()", ".start()"):
        out = out.replace(call, f"{call[:-1]}{root!r})")
    return out


def test_a_kafka_job_runs_on_a_lake_with_only_the_format_and_path_changed(spark, lake, tmp_path):
    root = str(tmp_path / "lake")
    shutil.copytree(lake, root)
    job = for_lake(KAFKA_JOB, root)
    changed = [
        (a, b) for a, b in zip(KAFKA_JOB.splitlines(), job.splitlines(), strict=True) if a != b
    ]
    assert len(changed) == 4 + 4  # four formats, four paths (two loads, a save, a start)
    exec(job, {"spark": spark, "checkpoint": str(tmp_path / "cp")})
    source = _values(spark, root)
    assert _values(spark, root, "copied") == source
    assert _values(spark, root, "streamed") == source
    assert Path(root, "_catalog").is_dir()
