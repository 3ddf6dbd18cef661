"""A Kafka topic archived into a lake and replayed, with the real broker as the judge.

``readStream.format("kafka")`` -> ``writeStream.format("seglake")`` must leave the lake a
faithful copy of the topics: every record at the broker's offset (gaps from transaction
markers included) with its timestamp, timestampType, key, value and headers, as a Kafka
consumer (confluent-kafka) reads them; also after the driver is SIGKILLed mid-stream and
restarted on its checkpoint. ``spark.read.format("kafka")`` on the broker and
``spark.read.format("seglake")`` on the lake return the same DataFrame, all columns.
``readStream.format("seglake")`` -> ``writeStream.format("kafka")`` replays the lake into
a new topic: the same key, value, headers, partition, in order.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pyarrow.compute as pc
import pytest

import seglake.spark
from seglake import fs as lakefs
from seglake.cli.main import main as seglake_cli
from seglake.kafka_broker import KafkaBroker
from seglake.lake.catalog import Catalog
from seglake.lake.rows import segment_refs
from seglake.lake_paths import STAGING_DIR
from seglake.storage.log import PartitionLog
from seglake.testing_hooks import CRASH_AT
from tests.kafka_client import (
    Rec,
    consume_all,
    create_topic,
    producer,
    sample_records,
    send,
    wait_stable,
)
from tests.process_group import run_group

pytestmark = pytest.mark.spark
RUNNER = Path(__file__).resolve().parents[2] / "stream_runner.py"
# CreateTime, 3 partitions, a committed and an aborted transaction (their markers leave
# gaps in the offsets); LogAppendTime, 2 partitions
TOPICS = {"archive": 3, "archive-lat": 2}
TIMESTAMP_TYPES = {"archive": "CreateTime", "archive-lat": "LogAppendTime"}
SINK = {"log.segment.bytes": "30000", "log.index.interval.bytes": "1024"}


@dataclasses.dataclass
class Archive:
    broker: KafkaBroker
    topic_records: dict[str, list[Rec]]  # what a consumer reads (read_uncommitted)
    root: str


def kafka_options(broker: KafkaBroker, **more: str) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": ",".join(TOPICS),
        "startingOffsets": "earliest",
        "includeHeaders": "true",
        **more,
    }


def _produce(broker: KafkaBroker) -> dict[str, list[Rec]]:
    for topic, n in TOPICS.items():
        # the records are from 2026-01-01: no retention may delete them meanwhile
        config = {"message.timestamp.type": TIMESTAMP_TYPES[topic], "retention.ms": "-1"}
        create_topic(broker, topic, n, config)
    plain = producer(broker, enable_idempotence=True, compression_type="lz4")
    recs = sample_records(1500, seed=41, partitions=TOPICS["archive"])
    for rec in recs[:800]:
        send(plain, "archive", rec)
    assert plain.flush(60) == 0
    tx = producer(broker, transactional_id="tx-archive", compression_type="zstd")
    tx.init_transactions(60)
    for i, abort in enumerate((False, True)):
        tx.begin_transaction()
        for rec in recs[800 + 100 * i : 900 + 100 * i]:
            send(tx, "archive", rec)
        tx.flush(60)
        tx.abort_transaction(60) if abort else tx.commit_transaction(60)
    for rec in recs[1000:]:
        send(plain, "archive", rec)
    lat = sample_records(400, seed=42, partitions=TOPICS["archive-lat"])
    for i, rec in enumerate(lat):
        send(plain, "archive-lat", rec)
        if i % 50 == 49:  # several broker batches: several append times
            assert plain.flush(60) == 0
    assert plain.flush(60) == 0
    wait_stable(broker, "archive", TOPICS["archive"])
    return {t: consume_all(broker, t, n, "read_uncommitted") for t, n in TOPICS.items()}


def lake_recs(root: str, topic: str) -> tuple[list[Rec], set[int]]:
    """The lake's records of ``topic`` read without Spark, and their timestamp types."""
    fs, base = lakefs.resolve(root)
    rows = Catalog(root).segments()
    rows = rows.filter(pc.equal(rows["topic"], topic))
    out: list[Rec] = []
    types: set[int] = set()
    for p in sorted(set(rows["partition"].to_pylist())):
        log = PartitionLog.from_refs(
            fs, base, segment_refs(rows.filter(pc.equal(rows["partition"], p)))
        )
        t = log.read_range(log.log_start_offset, log.log_end_offset).to_pylist()
        types |= {r["timestamp_type"] for r in t}
        out += [
            Rec(
                p,
                r["offset"],
                r["timestamp"],
                r["key"],
                r["value"],
                tuple((h["key"], h["value"]) for h in r["headers"]),
            )
            for r in t
        ]
    return sorted(out), types


def assert_lake_is_the_topics(root: str, topic_records: dict[str, list[Rec]]) -> None:
    for topic, want in topic_records.items():
        got, types = lake_recs(root, topic)
        assert len(got) == len(want), (topic, len(got), len(want))
        bad = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
        assert not bad, f"{topic}: {len(bad)} records differ, first {bad[0]}"
        assert types == {0 if TIMESTAMP_TYPES[topic] == "CreateTime" else 1}


@pytest.fixture(scope="module")
def archive(spark, kafka_broker: KafkaBroker, tmp_path_factory) -> Archive:
    """The topics produced, then archived by one stream (several micro-batches)."""
    seglake.spark.register(spark)
    topic_records = _produce(kafka_broker)
    base = tmp_path_factory.mktemp("archive")
    root = str(base / "lake")
    src = spark.readStream.format("kafka").options(
        **kafka_options(kafka_broker, maxOffsetsPerTrigger="700")
    )
    q = (
        src.load()
        .writeStream.format("seglake")
        .options(**SINK)
        .option("checkpointLocation", str(base / "cp"))
        .trigger(availableNow=True)
        .start(root)
    )
    q.awaitTermination()
    assert len(q.recentProgress) >= 3
    return Archive(kafka_broker, topic_records, root)


def test_the_lake_is_a_faithful_copy_of_the_topics(archive: Archive) -> None:
    recs = archive.topic_records["archive"]
    offsets = {p: [r.offset for r in recs if r.partition == p] for p in range(3)}
    # the markers' offsets are gaps; the aborted transaction's records are there
    assert any(o[-1] + 1 > len(o) for o in offsets.values())
    assert any(r.value is None for r in recs) and any(r.headers for r in recs)
    assert_lake_is_the_topics(archive.root, archive.topic_records)


def _sorted_rows(df) -> list[dict]:
    return sorted(df.toArrow().to_pylist(), key=lambda r: (r["topic"], r["partition"], r["offset"]))


def test_kafka_and_seglake_batch_reads_return_the_same_dataframe(spark, archive: Archive) -> None:
    kafka = spark.read.format("kafka").options(**kafka_options(archive.broker)).load()
    # the same option map, kafka.bootstrap.servers too: only the format and the path differ
    lake = spark.read.format("seglake").options(**kafka_options(archive.broker)).load(archive.root)
    assert lake.schema.simpleString() == kafka.schema.simpleString()
    want, got = _sorted_rows(kafka), _sorted_rows(lake)
    assert len(got) == len(want) == sum(len(r) for r in archive.topic_records.values())
    bad = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
    fields = sorted({k for g, w in bad for k in g if g[k] != w[k]})
    assert not bad, f"{len(bad)} rows differ in {fields}, first {bad[0]}"


def test_replay_into_a_new_topic(spark, archive: Archive, tmp_path) -> None:
    new = "archive-replayed"
    create_topic(archive.broker, new, TOPICS["archive"], {"retention.ms": "-1"})
    q = (
        spark.readStream.format("seglake")  # a Kafka source's option map
        .options(**kafka_options(archive.broker, subscribe="archive", maxOffsetsPerTrigger="600"))
        .load(archive.root)
        .select("key", "value", "headers", "partition")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", archive.broker.bootstrap)
        .option("topic", new)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    replayed = consume_all(archive.broker, new, TOPICS["archive"], "read_uncommitted")

    def seq(recs: list[Rec]) -> dict[int, list[tuple]]:
        out: dict[int, list[tuple]] = {}
        for r in sorted(recs):
            out.setdefault(r.partition, []).append((r.key, r.value, r.headers))
        return out

    assert seq(replayed) == seq(archive.topic_records["archive"])


def test_driver_killed_mid_stream_restarts_exactly_once(archive: Archive, tmp_path) -> None:
    root, checkpoint = str(tmp_path / "lake"), str(tmp_path / "cp")
    spec = {
        "kafka": kafka_options(archive.broker, maxOffsetsPerTrigger="500"),
        "root": root,
        "checkpoint": checkpoint,
        "options": SINK,
        "spark_conf": {"spark.local.dir": str(tmp_path / "spark-local")},
    }
    # batch 1 committed to the catalog, the driver dies before Spark's commit log records
    # it: the restart replays batch 1 (found committed: nothing written twice), then on
    done = run_group(RUNNER, json.dumps(spec), {CRASH_AT: "catalog.commit.done:2"})
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    half = {t: lake_recs(root, t)[0] for t in TOPICS}
    assert 0 < sum(map(len, half.values())) < sum(map(len, archive.topic_records.values()))
    for t, recs in half.items():  # what was archived is each partition's beginning
        for p in range(TOPICS[t]):
            mine = [r for r in recs if r.partition == p]
            whole = [r for r in archive.topic_records[t] if r.partition == p]
            assert mine == whole[: len(mine)]
    done = run_group(RUNNER, json.dumps(spec), {})
    assert done.returncode == 0, done.stderr[-3000:]
    assert_lake_is_the_topics(root, archive.topic_records)
    # the killed attempt's pieces are garbage that cleanup removes; nothing else is left
    assert seglake_cli(["cleanup", "--older-than", "0", root]) == 0
    assert not [p for p in Path(root, STAGING_DIR).rglob("*") if p.is_file()]
