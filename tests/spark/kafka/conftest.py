"""Kafka itself as the judge: one loopback broker for the session (started by
:mod:`seglake.kafka_broker`, the code ``make kafka`` runs), and what a real client
produced to it and got back from it, produced once.

These tests skip only when java or the ``.jars/kafka`` jars are missing (``make jars``)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from seglake.kafka_broker import KafkaBroker, missing_requirements
from tests.kafka_client import (
    CODECS,
    ISOLATION,
    T0,
    Rec,
    consume_all,
    create_topic,
    list_offsets,
    producer,
    sample_records,
    send,
    wait_stable,
)

CODEC_RECORDS = 1500
PARTITIONS = 2
COMPACT_KEYS = 40
COMPACT_CONFIG = {
    "min.cleanable.dirty.ratio": "0",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "86400000",
    "segment.ms": "15000",
    "message.timestamp.type": "CreateTime",
}
CLEANER_TIMEOUT_S = 180


@dataclasses.dataclass
class Produced:
    """What the client produced and what the broker answered, the broker stopped after."""

    broker: KafkaBroker
    topics: dict[str, int]  # topic -> partitions
    consumed: dict[tuple[str, str], list[Rec]]  # (topic, isolation) -> records
    list_offsets: dict[tuple[str, int, str], dict[int, tuple[int, int]]]
    snapshot: Path  # a copy of the broker's log dir, taken with the broker stopped
    compact_end: int  # the sentinel's offset: the cleaned section ends there


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    why = missing_requirements()
    if why:
        pytest.skip(f"no Kafka broker here: {why}")
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _produce_codecs(broker: KafkaBroker) -> dict[str, int]:
    topics = {}
    for i, codec in enumerate(CODECS):
        topic = f"codec-{codec}"
        create_topic(broker, topic, PARTITIONS, {"message.timestamp.type": "CreateTime"})
        p = producer(broker, compression_type=codec, enable_idempotence=codec != "none", acks="all")
        for rec in sample_records(CODEC_RECORDS, seed=i, partitions=PARTITIONS):
            send(p, topic, rec)
        assert p.flush(60) == 0
        topics[topic] = PARTITIONS
    return topics


def _produce_transactions(broker: KafkaBroker) -> None:
    """Two transactional producers whose transactions overlap (committed and aborted
    interleaved in the log) and an idempotent one writing between them."""
    topic = "txn"
    create_topic(broker, topic, PARTITIONS, {})
    a = producer(broker, transactional_id="tx-a", compression_type="lz4")
    b = producer(broker, transactional_id="tx-b", compression_type="zstd")
    plain = producer(broker, enable_idempotence=True)
    a.init_transactions(60)
    b.init_transactions(60)
    recs = iter(sample_records(4000, seed=7, partitions=PARTITIONS))
    for round_ in range(12):
        a.begin_transaction()
        b.begin_transaction()
        for _ in range(60):
            send(a, topic, next(recs))
        a.flush(60)
        for _ in range(60):
            send(b, topic, next(recs))
        b.flush(60)
        for _ in range(30):
            send(plain, topic, next(recs))
        plain.flush(60)
        for _ in range(40):
            send(a, topic, next(recs))
        a.flush(60)
        # a: committed 2 of 3 rounds; b: aborted 2 of 3 rounds
        if round_ % 3 == 2:
            a.abort_transaction(60)
        else:
            a.commit_transaction(60)
        if round_ % 3 == 0:
            b.commit_transaction(60)
        else:
            b.abort_transaction(60)
    wait_stable(broker, topic, PARTITIONS)


def compact_records(n: int) -> list[dict]:
    """Text keys and values (DumpLogSegments prints them), tombstones, one partition."""
    recs = sample_records(n, seed=11, partitions=1, keys=COMPACT_KEYS, text=True)
    for i, r in enumerate(recs):
        r.setdefault("key", f"k{i % COMPACT_KEYS}".encode())
        r["timestamp"] = T0 + i * 100
        if i % 13 == 4:
            r["value"] = None  # a tombstone
    return recs


def _produce_compacted(broker: KafkaBroker) -> int:
    """The same records, transactions and markers into ``compacted`` (cleaned by the
    broker) and ``compacted-raw`` (never cleaned), at the same offsets; a last record an
    hour later rolls both logs so that everything before it is cleanable. Returns that
    record's offset once the cleaner's checkpoint has reached it."""
    create_topic(broker, "compacted", 1, {**COMPACT_CONFIG, "cleanup.policy": "compact"})
    create_topic(
        broker,
        "compacted-raw",
        1,
        {**COMPACT_CONFIG, "cleanup.policy": "delete", "retention.ms": "-1"},
    )
    plain = producer(broker, enable_idempotence=True, compression_type="gzip")
    tx = producer(broker, transactional_id="tx-compact", compression_type="snappy")
    tx.init_transactions(60)
    recs = compact_records(3000)
    for chunk in range(0, len(recs), 250):
        part = recs[chunk : chunk + 250]
        if (chunk // 250) % 2 == 0:
            for rec in part:
                for topic in ("compacted", "compacted-raw"):
                    send(plain, topic, rec)
            assert plain.flush(60) == 0
        else:
            tx.begin_transaction()
            for rec in part:
                for topic in ("compacted", "compacted-raw"):
                    send(tx, topic, rec)
            tx.flush(60)
            if (chunk // 250) % 4 == 3:
                tx.abort_transaction(60)
            else:
                tx.commit_transaction(60)
            for topic in ("compacted", "compacted-raw"):
                wait_stable(broker, topic, 1)
    last = {"partition": 0, "key": b"sentinel", "value": b"end", "timestamp": T0 + 3_600_000}
    for topic in ("compacted", "compacted-raw"):
        send(plain, topic, last)
    assert plain.flush(60) == 0
    end = list_offsets(broker, "compacted", 0, [-1])[-1][0] - 1
    assert end == list_offsets(broker, "compacted-raw", 0, [-1])[-1][0] - 1
    deadline = time.monotonic() + CLEANER_TIMEOUT_S
    while broker.cleaner_checkpoint().get(("compacted", 0), -1) < end:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the broker's cleaner did not reach offset {end} of compacted-0 in "
                f"{CLEANER_TIMEOUT_S} s (checkpoint {broker.cleaner_checkpoint()})"
            )
        time.sleep(0.5)
    return end


def timestamps_to_ask(records: list[Rec]) -> list[int]:
    """>= 100 timestamps: before, inside (record times and in between) and after the log,
    plus -1, -2, -3."""
    ts = sorted({r.timestamp for r in records})
    step = max(1, len(ts) // 90)
    picks = ts[::step] + [t + 1 for t in ts[::step][:30]]
    return [0, ts[0] - 1, ts[-1], ts[-1] + 1, 2**62, *picks, -1, -2, -3]


@pytest.fixture(scope="session")
def produced(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Produced:
    broker = kafka_broker
    topics = _produce_codecs(broker)
    _produce_transactions(broker)
    topics["txn"] = PARTITIONS
    compact_end = _produce_compacted(broker)
    topics["compacted"] = 1
    topics["compacted-raw"] = 1
    consumed = {
        (t, iso): consume_all(broker, t, n, iso) for t, n in topics.items() for iso in ISOLATION
    }
    offsets = {}
    for t, n in topics.items():
        for p in range(n):
            recs = [r for r in consumed[(t, "read_uncommitted")] if r.partition == p]
            specs = timestamps_to_ask(recs)
            for iso in ISOLATION:
                offsets[(t, p, iso)] = list_offsets(broker, t, p, specs, iso)
    snapshot = tmp_path_factory.mktemp("broker-snapshot") / "logs"
    with broker.stopped():
        shutil.copytree(
            broker.log_dir,
            snapshot,
            ignore=shutil.ignore_patterns("__*", "*.lock"),
        )
    return Produced(broker, topics, consumed, offsets, snapshot, compact_end)
