"""Lake -> a broker serves it: partitions seglake wrote (the ingest job, lz4; the ingest
job then ``compact``, zstd, offset gaps and tombstones) placed as a broker's partition
logs (topic created, broker stopped, its segments swapped for seglake's, broker started
again). Kafka must load them without truncating anything, its consumer must read every
record back equal, ListOffsets by timestamp must equal seglake's answers (first with
seglake's own index files in use, then after a restart that makes Kafka recover every
segment), and a producer must append after seglake's log end offset."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import seglake
from seglake.kafka_broker import CLEAN_SHUTDOWN_FILE, KafkaBroker
from seglake.lake.catalog import Catalog
from seglake.lake.topic_store import alter_config
from tests.kafka_client import (
    ISOLATION,
    T0,
    Rec,
    consume_all,
    create_topic,
    list_offsets,
    producer,
    recs_from_arrow,
    send,
)

pytestmark = pytest.mark.spark

SERVED = "served"  # the ingest job's output
SERVED_COMPACTED = "served-compacted"  # ingest, then seglake compact
SEGMENT_FILES = (".log", ".index", ".timeindex")
N = 3000


def _input(topic: str, n: int, seed: int, keys: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    headers = [
        [{"key": "h", "value": f"x{i}".encode()}, {"key": "n", "value": None}] if i % 3 else []
        for i in range(n)
    ]
    return pa.table(
        {
            "topic": [topic] * n,
            "key": pa.array(
                [
                    None if i % 9 == 4 else f"k{int(k)}".encode()
                    for i, k in enumerate(rng.integers(0, keys, n))
                ],
                pa.binary(),
            ),
            "value": pa.array(
                [
                    None if i % 11 == 5 else f"v{i}-{int(rng.integers(1e6))}".encode()
                    for i in range(n)
                ],
                pa.binary(),
            ),
            "timestamp": pa.array(T0 + np.arange(n) * 50 + rng.integers(-300, 300, n), pa.int64()),
            "headers": pa.array(
                headers,
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, pa.Table]:
    from seglake.spark.ingest import ingest

    root = str(tmp_path_factory.mktemp("to-broker") / "lake")
    served = _input(SERVED, N, 1, keys=500)
    conf = {"log.segment.bytes": "40000", "log.index.interval.bytes": "1024"}
    changelog = _input(SERVED_COMPACTED, N, 2, keys=40)
    changelog = changelog.set_column(
        1, "key", pa.array([f"k{i % 40}".encode() for i in range(N)], pa.binary())
    )
    for table, codec in ((served, "lz4"), (changelog, "zstd")):
        df = spark.createDataFrame(table)
        ingest(spark, df, root, num_partitions=1, conf={**conf, "compression.type": codec})
    alter_config(
        Catalog(root),
        SERVED_COMPACTED,
        set_={
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0",
            "delete.retention.ms": "86400000",
        },
    )
    seglake.spark.compact(spark, root, topics=SERVED_COMPACTED)
    return root, served


def _seglake_records(root: str, topic: str) -> list[Rec]:
    return recs_from_arrow(
        seglake.open(root).partition(topic, 0).read(0, max_records=10 * N, as_="arrow")
    )


def _swap_in(broker: KafkaBroker, root: str, topic: str) -> None:
    """The broker's (empty) segment files of ``topic``-0 replaced by seglake's."""
    d = broker.partition_dir(topic, 0)
    for f in d.iterdir():
        if f.suffix in (*SEGMENT_FILES, ".snapshot", ".txnindex"):
            f.unlink()
    for src in sorted((Path(root) / f"{topic}-0").iterdir()):
        if src.suffix in SEGMENT_FILES:
            shutil.copy2(src, d / src.name)


def _recovery_point_zero(broker: KafkaBroker, topics: set[str]) -> None:
    """Kafka's recovery point of ``topics``' partitions set to 0: with no clean-shutdown
    marker, it recovers every segment from there (checks each batch, rebuilds indexes)."""
    path = broker.log_dir / "recovery-point-offset-checkpoint"
    lines = path.read_text().splitlines()
    entries = [x.split() for x in lines[2:] if x.strip()]
    entries = [[t, p, "0" if t in topics else o] for t, p, o in entries]
    assert {e[0] for e in entries} >= topics
    path.write_text("\n".join([lines[0], str(len(entries)), *map(" ".join, entries)]) + "\n")


def _kafka_lines(broker: KafkaBroker, since: int) -> list[str]:
    with open(broker.server_log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [line for line in text.splitlines() if "served" in line]


def test_a_broker_serves_seglake_partitions(kafka_broker: KafkaBroker, lake) -> None:
    root, served = lake
    broker = kafka_broker
    nb = seglake.open(root)
    expect = {t: _seglake_records(root, t) for t in (SERVED, SERVED_COMPACTED)}
    # the independent oracle of the ingest: its input, at offsets 0..N-1
    assert [(r.key, r.value, r.timestamp, r.headers) for r in expect[SERVED]] == [
        (d["key"], d["value"], d["timestamp"], tuple((h["key"], h["value"]) for h in d["headers"]))
        for d in served.to_pylist()
    ]
    assert len(expect[SERVED_COMPACTED]) < N / 2  # cleaned (its newest segment is not)
    for t in expect:
        create_topic(broker, t, 1, {})
    since = broker.server_log.stat().st_size
    with broker.stopped():
        for t in expect:
            _swap_in(broker, root, t)

    def check_served(stage: str) -> None:
        for t, want in expect.items():
            part = nb.partition(t, 0)
            assert list_offsets(broker, t, 0, [-1])[-1][0] == part.log_end_offset, (stage, t)
            for iso in ISOLATION:
                assert consume_all(broker, t, 1, iso) == want, (stage, t, iso)
            times = sorted({r.timestamp for r in want})
            specs = [0, *times[:: max(1, len(times) // 110)], times[-1] + 1, -2, -3]
            kafka = list_offsets(broker, t, 0, specs)
            ours = {}
            for spec in specs:
                found = part.offsets_for_times(spec)
                ours[spec] = (-1, -1) if found is None else (found.offset, found.timestamp)
            assert {s: o for s, (o, _) in kafka.items()} == {s: o for s, (o, _) in ours.items()}, (
                stage,
                t,
            )
            assert len(specs) >= 100 or len(times) < 100

    check_served("seglake's indexes")
    # again after a restart that makes Kafka recover (re-validate and re-index) every segment
    with broker.stopped():
        (broker.log_dir / CLEAN_SHUTDOWN_FILE).unlink()
        _recovery_point_zero(broker, set(expect))
    check_served("recovered by Kafka")
    lines = _kafka_lines(broker, since)
    bad = [
        line
        for line in lines
        if any(w in line for w in ("runcat", "nvalid", "orrupt", "Deleting segment"))
    ]
    assert bad == []
    for t in expect:  # every segment recovered, from the first
        assert any(f"Recovering unflushed segment 0. 0 recovered for {t}-0" in x for x in lines)
    # a producer appends after seglake's log end offset
    p = producer(broker, enable_idempotence=True, compression_type="lz4")
    for t in expect:
        send(p, t, {"partition": 0, "key": b"after", "value": b"seglake"})
    assert p.flush(60) == 0
    for t, want in expect.items():
        leo = nb.partition(t, 0).log_end_offset
        got = consume_all(broker, t, 1, "read_committed")
        assert got[:-1] == want
        assert (got[-1].offset, got[-1].key, got[-1].value) == (leo, b"after", b"seglake")
