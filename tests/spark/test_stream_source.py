"""The streaming source: ``spark.readStream.format("seglake")`` against the batch data
source (the oracle: the same rows), with Kafka's stream options: startingOffsets,
maxOffsetsPerTrigger with Trigger.AvailableNow, restart from a checkpoint, new
partitions, failOnDataLoss; and a lake streamed into a second lake record for record."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

import seglake.spark
from seglake.errors import ConfigError
from seglake.lake.handle import LakeHandle
from seglake.lake.retention import RetentionOptions, apply_retention
from seglake.lake.table import CatalogTable
from seglake.sample import generate
from seglake.spark.ingest import ingest
from seglake.spark.stream_source import SeglakeStreamReader, StreamLimits
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
    if not {"subscribe", "subscribePattern", "assign"} & set(options):
        options = {"subscribePattern": ".*", **options}  # every topic, as Kafka's asks
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
    batch = spark.read.format("seglake").option("subscribePattern", ".*").load(root)
    assert _rows(spark.read.parquet(out)) == _rows(batch)
    # more records, and a third partition: the restarted query reads exactly those
    _ingest(spark, root, 700, seed=4, topic="s1", partitions=3)
    progress = _stream(spark, root, cp, out, **opts)
    assert sum(p["numInputRows"] for p in progress) == 700
    assert max(p["numInputRows"] for p in progress) <= 600
    got = _rows(spark.read.parquet(out))
    assert (
        got == _rows(spark.read.format("seglake").option("subscribePattern", ".*").load(root))
        and len(got) == 2700
    )
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
    report = apply_retention(LakeHandle.open(root), rules, RetentionOptions(delete_delay_ms=0))
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
        df = (
            spark.read.format("seglake")
            .option("subscribePattern", ".*")
            .option("includeHeaders", "true")
            .load(lake)
        )
        return sorted(tuple(map(str, r)) for r in df.select(cols).collect())

    assert everything(copy) == everything(root)


def _reader(root: str, **options) -> SeglakeStreamReader:
    if not {"subscribe", "subscribePattern", "assign"} & set(options):
        options = {"subscribePattern": ".*", **options}  # every topic, as Kafka's asks
    return SeglakeStreamReader({"path": root, **{k: str(v) for k, v in options.items()}}, None, 2)


def test_a_micro_batch_reads_the_catalog_once_and_packs_its_splits_into_tasks(
    spark, tmp_path, monkeypatch
):
    root = str(tmp_path / "lake")
    _ingest(spark, root, 3000, seed=7, topic="s3", partitions=3)
    log_ends = {"s3": {str(p): o for (_, p), o in CatalogTable(root).log_end_offsets().items()}}
    reads = []
    segments = CatalogTable.segments
    monkeypatch.setattr(
        CatalogTable, "segments", lambda self, *a, **k: reads.append(1) or segments(self, *a, **k)
    )
    r = _reader(root, subscribe="s3", startingOffsets="earliest", maxOffsetsPerTrigger=2000)
    start = r.initialOffset()
    got: list[tuple] = []
    for _ in range(2):  # what Spark calls for a micro-batch, in its order
        before = len(reads)
        end = r.latestOffset(start, r.getDefaultReadLimit())
        assert r.reportLatestOffset() == log_ends
        parts = r.partitions(start, end)
        # one catalog version for the whole batch: the one initialOffset read, kept (at
        # most one read a batch, none while the lake stays at the version kept)
        assert len(reads) - before == 0
        # ~300 kB of 20 kB segments: one task (at least 4 MiB each), not one per split
        assert len(parts) == 1 and len(parts[0].value) > 3
        batch = pa.Table.from_batches([b for p in parts for b in r.read(p)])
        assert (
            batch.num_rows == sum(e - start["s3"][p] for p, e in end["s3"].items())
            and batch.num_rows <= 2000
        )
        got += _rows_of(batch)
        # the same batch planned by a restarted query (Spark replays it from its offset
        # log): one catalog read, the same splits
        again = _reader(root, subscribe="s3", startingOffsets="earliest")
        before = len(reads)
        assert [p.value for p in again.partitions(start, end)] == [p.value for p in parts]
        assert len(reads) - before == 1
        start = end
    batch = (
        spark.read.format("seglake")
        .option("subscribePattern", ".*")
        .load(root)
        .select(*_COLS)
        .collect()
    )
    assert sorted(got) == sorted(tuple(r) for r in batch)


_COLS = ["topic", "partition", "offset", "key", "value", "timestampType"]


def _rows_of(t: pa.Table) -> list[tuple]:
    return [tuple(r[c] for c in _COLS) for r in t.to_pylist()]


def test_min_offsets_per_trigger_waits_for_max_trigger_delay_as_kafka(spark, tmp_path):
    root = str(tmp_path / "lake")
    _ingest(spark, root, 1000, seed=8, topic="s4", partitions=1)
    r = _reader(root, minOffsetsPerTrigger=500, maxTriggerDelay="10s")
    now = [100.0]
    r.clock = lambda: now[0]
    limit = r.getDefaultReadLimit()
    assert limit == ReadMinRows(500)

    def at(offset: int) -> dict:
        return {"s4": {"0": offset}}

    assert r.latestOffset(at(900), limit) == at(1000)  # the first trigger is let through
    now[0] = 101.0
    assert r.latestOffset(at(800), limit) == at(800)  # 200 new < 500: wait
    now[0] = 109.9
    assert r.latestOffset(at(800), limit) == at(800)
    assert r.latestOffset(at(800), ReadAllAvailable()) == at(1000)  # never waits
    now[0] = 110.0  # maxTriggerDelay is over: a batch, and the delay starts again
    assert r.latestOffset(at(800), limit) == at(1000)
    now[0] = 111.0
    assert r.latestOffset(at(999), limit) == at(999)
    assert r.latestOffset(at(400), limit) == at(1000)  # 600 new >= 500: no wait
    # with maxOffsetsPerTrigger too: Spark hands the max (Python has no composite
    # limit); the source still waits for the min, then cuts at the max
    both = _reader(root, minOffsetsPerTrigger=450, maxOffsetsPerTrigger=500)
    both.clock, both.last_trigger = (lambda: 0.0), 0.0
    assert both.getDefaultReadLimit() == ReadMaxRows(500)
    assert both.latestOffset(at(600), ReadMaxRows(500)) == at(600)
    assert both.latestOffset(at(100), ReadMaxRows(500)) == at(600)
    # Trigger.AvailableNow never waits (it must end): every record, batches of <= 300,
    # the last of 100 (below minOffsetsPerTrigger)
    out = str(tmp_path / "out")
    opts = {"startingOffsets": "earliest", "minOffsetsPerTrigger": 300, "maxTriggerDelay": "1h"}
    progress = _stream(spark, root, str(tmp_path / "cp"), out, **opts, maxOffsetsPerTrigger=300)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(sizes) <= 300 and min(sizes) < 300  # the last one did not wait
    assert spark.read.parquet(out).count() == 1000


@pytest.mark.parametrize(
    ("value", "ms"), [("500ms", 500), ("30s", 30_000), ("2m", 120_000), ("1h", 3_600_000)]
)
def test_max_trigger_delay_takes_kafkas_durations(value, ms):
    assert StreamLimits.parse({"maxTriggerDelay": value}).max_delay_ms == ms


def test_bad_stream_limits_are_one_clear_error():
    with pytest.raises(ConfigError, match="maxTriggerDelay: 'soon' is not a duration"):
        StreamLimits.parse({"maxTriggerDelay": "soon"})
    with pytest.raises(ConfigError, match="minOffsetsPerTrigger: 0 is below 1"):
        StreamLimits.parse({"minOffsetsPerTrigger": "0"})


def test_min_offsets_above_max_offsets_is_refused_as_spark_does():
    # Spark's KafkaMicroBatchSourceSuite: "value of minOffsetPerTrigger(20) is higher than
    # the maxOffsetsPerTrigger(15)"; equal is allowed
    with pytest.raises(
        ConfigError, match=r"minOffsetsPerTrigger=20 is above maxOffsetsPerTrigger=15"
    ):
        StreamLimits.parse({"minOffsetsPerTrigger": "20", "maxOffsetsPerTrigger": "15"})
    both = StreamLimits.parse({"minOffsetsPerTrigger": "15", "maxOffsetsPerTrigger": "15"})
    assert (both.min_offsets, both.max_offsets) == (15, 15)
