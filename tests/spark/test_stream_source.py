"""The streaming source: ``spark.readStream.format("seglake")`` against the batch data
source (the oracle: the same rows), with Kafka's stream options: startingOffsets,
maxOffsetsPerTrigger with Trigger.AvailableNow, restart from a checkpoint, new
partitions, failOnDataLoss; and a lake streamed into a second lake record for record."""

from __future__ import annotations

import shutil

import pytest

import seglake.spark
from seglake.lake.retention import apply_retention
from seglake.sample import generate
from seglake.spark.ingest import ingest
from seglake.storage.retention import RetentionRules

pytestmark = pytest.mark.spark
CONF = {"log.segment.bytes": "20000", "batch.size": "2048", "log.index.interval.bytes": "2048"}


@pytest.fixture(scope="module", autouse=True)
def registered(spark):
    seglake.spark.register(spark)


def _ingest(spark, root: str, n: int, *, seed: int, topic: str, partitions: int) -> None:
    msgs = generate(n, seed=seed, topics=(topic,))
    ingest(spark, spark.createDataFrame(msgs), root, num_partitions=partitions, conf=CONF)


def _stream(spark, root: str, checkpoint: str, out: str, sink: str = "parquet", **options):
    """One Trigger.AvailableNow run of a seglake stream into ``out``; its progress list."""
    reader = spark.readStream.format("seglake")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    query = (
        reader.load(root)
        .writeStream.format(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination()
    return [p for p in query.recentProgress if p["numInputRows"] or p["sources"]]


def _rows(df) -> list[tuple]:
    return sorted(
        tuple(r)
        for r in df.select(
            "topic", "partition", "offset", "key", "value", "timestamp", "timestampType"
        ).collect()
    )


def test_available_now_reads_what_the_batch_source_reads_then_only_new_records(spark, tmp_path):
    root, cp, out = str(tmp_path / "lake"), str(tmp_path / "cp"), str(tmp_path / "out")
    _ingest(spark, root, 2000, seed=3, topic="s1", partitions=2)
    opts = {"subscribe": "s1", "startingOffsets": "earliest", "maxOffsetsPerTrigger": 600}
    progress = _stream(spark, root, cp, out, **opts)
    sizes = [p["numInputRows"] for p in progress]
    assert max(sizes) <= 600 and sum(sizes) == 2000 and len([s for s in sizes if s]) >= 4
    batch = spark.read.format("seglake").load(root)
    assert _rows(spark.read.parquet(out)) == _rows(batch)
    # more records, and a third partition: the restarted query reads exactly those
    _ingest(spark, root, 700, seed=4, topic="s1", partitions=3)
    progress = _stream(spark, root, cp, out, **opts)
    assert sum(p["numInputRows"] for p in progress) == 700
    assert max(p["numInputRows"] for p in progress) <= 600
    got = _rows(spark.read.parquet(out))
    assert got == _rows(spark.read.format("seglake").load(root)) and len(got) == 2700
    assert {r[1] for r in got} == {0, 1, 2}
    # a new query starts at the log end by default (startingOffsets=latest)
    progress = _stream(spark, root, str(tmp_path / "cp2"), str(tmp_path / "out2"), subscribe="s1")
    assert sum(p["numInputRows"] for p in progress) == 0


def test_offsets_removed_before_they_were_read_are_data_loss(spark, tmp_path):
    root, cp, out = str(tmp_path / "lake"), str(tmp_path / "cp"), str(tmp_path / "out")
    first = generate(600, seed=5, topics=("s2",))
    ingest(spark, spark.createDataFrame(first), root, num_partitions=1, conf=CONF)
    _stream(spark, root, cp, out, subscribe="s2", startingOffsets="earliest")
    _ingest(spark, root, 1500, seed=6, topic="s2", partitions=1)
    rules = RetentionRules(log_start_offsets={("s2", 0): 1500})
    report = apply_retention(root, rules, delete_delay_ms=0)
    lso = max(r["next_offset"] for r in report.deleted.to_pylist())
    assert 600 < lso <= 1500  # offsets 600..lso-1 went before the stream read them
    shutil.copytree(cp, str(tmp_path / "cp-skip"))  # the same query, twice
    skip = str(tmp_path / "out-skip")
    shutil.copytree(out, skip)
    with pytest.raises(Exception, match="failOnDataLoss"):
        _stream(spark, root, cp, out, subscribe="s2", startingOffsets="earliest")
    _stream(
        spark,
        root,
        str(tmp_path / "cp-skip"),
        skip,
        subscribe="s2",
        startingOffsets="earliest",
        failOnDataLoss="false",
    )
    offsets = sorted(r.offset for r in spark.read.parquet(skip).select("offset").collect())
    assert [o for o in offsets if o >= 600] == list(range(lso, 2100))


def test_a_lake_streamed_into_another_lake_is_the_same_record_for_record(
    spark, query_lake, tmp_path
):
    root, _ = query_lake
    copy, cp = str(tmp_path / "copy"), str(tmp_path / "cp")
    progress = _stream(
        spark,
        root,
        cp,
        copy,
        sink="seglake",
        startingOffsets="earliest",
        includeHeaders="true",
        maxOffsetsPerTrigger=4000,
    )
    assert len([p for p in progress if p["numInputRows"]]) >= 2
    cols = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType", "headers"]

    def everything(lake: str) -> list[tuple]:
        df = spark.read.format("seglake").option("includeHeaders", "true").load(lake)
        return sorted(tuple(map(str, r)) for r in df.select(cols).collect())

    assert everything(copy) == everything(root)
