"""A real Kafka client (confluent-kafka: librdkafka, every codec, idempotence,
transactions) against the loopback broker of :mod:`seglake.kafka_broker`: the oracle of
the tests that put Kafka in the loop. Records are compared as :data:`Rec` tuples."""

from __future__ import annotations

import functools
import random
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from seglake.kafka_broker import KafkaBroker, kafka_classpath

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
ISOLATION = ("read_committed", "read_uncommitted")
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class Rec(NamedTuple):
    """One record as a Kafka consumer returns it."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


# errors of a client whose metadata predates a broker restart: retried (its next request
# refreshes the metadata), though librdkafka does not call all of them retriable
_STALE_LEADER = frozenset(
    {
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    }
)


def admin(broker: KafkaBroker) -> AdminClient:
    """One admin client per bootstrap address, kept (a dropped client fails its futures)."""
    return _admin(broker.bootstrap)


@functools.cache
def _admin(bootstrap: str) -> AdminClient:
    # kept past its broker's stop: only critical lines, not a "Connection refused" a
    # reconnect on stderr (level 3) until the process ends, as the producers
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})


def create_topic(broker: KafkaBroker, name: str, partitions: int, config: dict[str, str]) -> None:
    """A topic whose records are never deleted by time (they carry old CreateTimes)."""
    config = {"retention.ms": "-1", **config}
    futures = admin(broker).create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
    )
    futures[name].result(timeout=60)
    # metadata propagation: wait until the topic's partitions have a leader
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        md = admin(broker).list_topics(name, timeout=10).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} has no leader after 60 s")


def producer(broker: KafkaBroker, **conf: Any) -> Producer:
    base = {
        "bootstrap.servers": broker.bootstrap,
        "linger.ms": 5,
        "batch.num.messages": 150,
        "message.timeout.ms": 60000,
        "log_level": 2,
    }
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def _check(err: Any, msg: Any) -> None:
    if err is not None:
        raise RuntimeError(f"delivery to {msg.topic()}-{msg.partition()} failed: {err}")


def send(p: Producer, topic: str, rec: dict[str, Any]) -> None:
    """Produce one record (``partition``, ``key``, ``value``, ``headers``, ``timestamp``)."""
    while True:
        try:
            p.produce(topic, on_delivery=_check, **rec)
            return
        except BufferError:
            p.poll(0.1)


def sample_records(
    n: int, seed: int, partitions: int, keys: int = 300, text: bool = False
) -> list[dict[str, Any]]:
    """Keys (some null), values (some null, some empty), headers (some with null values,
    some none), CreateTime timestamps going back now and then."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else f"k{rng.randrange(keys)}".encode()
        if i % 11 == 5:
            value = None
        elif text:
            value = f"v{i}-{rng.randrange(10**6)}".encode()
        else:
            value = rng.randbytes(rng.randrange(0, 120))
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("h1", f"x{i}".encode()), ("h-null", None)]
        elif i % 5 == 0:
            headers = [("empty", b"")]
        rec: dict[str, Any] = {
            "partition": i % partitions,
            "value": value,
            "timestamp": T0 + i * 100 + rng.randrange(-400, 400),
            "headers": headers,
        }
        if key is not None:
            rec["key"] = key
        out.append(rec)
    return out


def consume_all(
    broker: KafkaBroker, topic: str, partitions: int, isolation: str, timeout: float = 120
) -> list[Rec]:
    """Every record of the topic from offset 0 to the end (the LSO under read_committed),
    as a consumer in ``isolation`` gets them, sorted by (partition, offset)."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"oracle-{topic}-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "check.crcs": True,
            # the fetch at a partition's end (its EOF) answered in 50 ms, not the 500 ms
            # a broker holds an empty fetch by default
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Rec] = []
        done: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consuming {topic} ({isolation}) took over {timeout} s")
            for m in c.consume(500, 0.1):  # a call returns at its timeout, not sooner
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise RuntimeError(f"consume {topic}: {m.error()}")
                done.discard(m.partition())
                out.append(
                    Rec(
                        m.partition(),
                        m.offset(),
                        m.timestamp()[1],
                        m.key(),
                        m.value(),
                        tuple((k, v) for k, v in (m.headers() or [])),
                    )
                )
        return sorted(out)
    finally:
        c.close()


def list_offsets(
    broker: KafkaBroker,
    topic: str,
    partition: int,
    specs: Sequence[int],
    isolation: str = "read_uncommitted",
) -> dict[int, tuple[int, int]]:
    """The broker's ListOffsets for each spec (a timestamp, or -1 latest, -2 earliest, -3
    max timestamp): spec -> (offset, timestamp); offset -1 when none."""
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation == "read_committed"
        else IsolationLevel.READ_UNCOMMITTED
    )
    special = {-1: OffsetSpec.latest, -2: OffsetSpec.earliest, -3: OffsetSpec.max_timestamp}
    out: dict[int, tuple[int, int]] = {}
    a = admin(broker)
    for spec in specs:
        offset_spec = special[spec]() if spec in special else OffsetSpec.for_timestamp(spec)
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + 60
        while True:
            try:
                res = a.list_offsets({tp: offset_spec}, isolation_level=level)[tp].result(60)
                break
            except KafkaException as e:  # e.g. just restarted: its leader epoch not caught up
                err = e.args[0]
                stale = err.code() in _STALE_LEADER  # the client's metadata is of before
                if not (err.retriable() or stale) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        out[spec] = (res.offset, res.timestamp)
    return out


def wait_stable(broker: KafkaBroker, topic: str, partitions: int, timeout: float = 60) -> None:
    """Until every partition's last stable offset equals its high watermark (the markers of
    ended transactions written)."""
    deadline = time.monotonic() + timeout
    while True:
        stable = all(
            list_offsets(broker, topic, p, [-1], "read_committed")[-1][0]
            == list_offsets(broker, topic, p, [-1])[-1][0]
            for p in range(partitions)
        )
        if stable:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: transactions still open after {timeout} s")
        time.sleep(0.2)


def dump_log_segments(files: Iterable[Path]) -> str:
    """Kafka's own ``kafka-dump-log.sh --deep-iteration --print-data-log`` output."""
    done = subprocess.run(
        [
            "java",
            "-Xmx256m",
            "-cp",
            kafka_classpath(),
            "kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--print-data-log",
            "--files",
            ",".join(str(f) for f in files),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"DumpLogSegments failed: {done.stderr[-2000:]}")
    return done.stdout


def recs_from_arrow(t: pa.Table) -> list[Rec]:
    """Kafka source columns (timestamp as a timestamp type or epoch ms)."""
    ts = t.column("timestamp")
    if pa.types.is_timestamp(ts.type):
        ts = ts.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        ms = [None if v is None else v // 1000 for v in ts.to_pylist()]
    else:
        ms = ts.to_pylist()
    headers = t.column("headers").to_pylist() if "headers" in t.column_names else [[]] * t.num_rows
    return sorted(
        Rec(p, o, m, k, v, tuple((h["key"], h["value"]) for h in (hs or [])))
        for p, o, m, k, v, hs in zip(
            t.column("partition").to_pylist(),
            t.column("offset").to_pylist(),
            ms,
            t.column("key").to_pylist(),
            t.column("value").to_pylist(),
            headers,
            strict=True,
        )
    )
