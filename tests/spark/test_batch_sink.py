"""``df.write.format("seglake")``: the batch sink, with the Spark Kafka sink's columns.

Oracles: the rows written, decoded back by kafka-python from the segment files and read by
``spark.read.format("seglake")``; Kafka's partitioner is kafka-python's murmur2. The retry
test runs the write in a driver of its own (tests/crash_runner.py, ``local[1,2]``: a task
may fail twice) whose first task attempt is SIGKILLed after it staged records.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka.partitioner.default import murmur2 as kp_murmur2
from pyspark.sql import types as T

from seglake.lake.catalog import Catalog
from seglake.lake_paths import STAGING_DIR
from seglake.record.batch import scan_batches
from seglake.sample import generate
from seglake.spark import register
from seglake.spark.batch_sink import OVERWRITE_REFUSED
from seglake.testing_hooks import CRASH_AT, CRASH_ONCE
from tests.key_index_check import check_partition_dir
from tests.lake_check import lake_records, same_records_as_input
from tests.process_group import run_group
from tests.spark.test_ingest import partition_records

pytestmark = pytest.mark.spark
RUNNER = Path(__file__).resolve().parents[1] / "crash_runner.py"
T0 = 1_767_225_600_000
N_PARTITIONS = 3
HEADERS = T.ArrayType(
    T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
)
SCHEMA = T.StructType(
    [
        T.StructField("key", T.StringType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("headers", HEADERS),
        T.StructField("offset", T.LongType()),  # ignored, as Kafka's sink ignores it
        T.StructField("topic", T.StringType()),  # overridden by the topic option
    ]
)


def _rows(n: int, seed: int) -> list[tuple]:
    out = []
    for i in range(n):
        j = i + seed * 1000
        out.append(
            (
                None if j % 17 == 0 else f"k{j % 23}",
                None if j % 29 == 0 else f"v{j}-".encode() + b"x" * (j % 50),
                1 if j % 11 == 0 else None,  # given, else the partitioner's
                dt.datetime.fromtimestamp((T0 + 37 * j) / 1000, dt.UTC),
                [("h", str(j).encode())] if j % 3 == 0 else None,
                10**9 + j,
                "not-the-topic",
            )
        )
    return out


def _expected(rows: list[tuple]) -> dict[int, list[tuple]]:
    """Per partition, the (timestamp ms, key, value, headers) the lake must hold, in input
    order (rows with a null key and no partition: anywhere, collected under -1)."""
    out: dict[int, list[tuple]] = {}
    for key, value, part, ts, headers, _, _ in rows:
        if part is None:
            part = -1 if key is None else (kp_murmur2(key.encode()) & 0x7FFFFFFF) % N_PARTITIONS
        ms = round(ts.timestamp() * 1000)
        rec = (ms, None if key is None else key.encode(), value, list(headers or []))
        out.setdefault(part, []).append(rec)
    return out


def _write(spark, rows, root: str, mode: str | None = "append", **options: str) -> None:
    w = spark.createDataFrame(rows, SCHEMA).coalesce(1).write.format("seglake")
    w = w.options(**{"topic": "orders", "num.partitions": str(N_PARTITIONS), **options})
    (w.mode(mode) if mode else w).save(root)


def _staged(root: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in Path(root, STAGING_DIR).rglob("*"))


def test_written_records_decode_with_kafka_python_and_read_back(spark, tmp_path):
    register(spark)
    root = str(tmp_path / "lake")
    first, second = _rows(400, 0), _rows(300, 1)
    producer = {"kafka.bootstrap.servers": "x", "kafka.compression.type": "lz4"}
    _write(spark, first, root, **{"log.segment.bytes": "4000", **producer})
    v1 = Catalog(root).version()
    first_logs = set(Path(root).rglob("*.log"))
    _write(spark, second, root, **{"log.segment.bytes": "4000"})
    assert Catalog(root).version() == v1 + 1  # one catalog commit per job
    codecs: dict[bool, set[int]] = {True: set(), False: set()}
    for log in Path(root).rglob("*.log"):  # the producer's codec: the first job's only
        codecs[log in first_logs] |= set(scan_batches(log.read_bytes()).codec.tolist())
    assert codecs == {True: {3}, False: {0}}, codecs
    want = _expected(first + second)
    anywhere = {repr(r) for r in want.pop(-1)}  # a null key and no partition
    got_all = []
    for p in range(N_PARTITIONS):
        got = partition_records(root, "orders", p)  # kafka-python, segment by segment
        assert [g[0] for g in got] == list(range(len(got)))  # offsets gapless from 0
        recs = [(ts, k, v, h) for _, ts, k, v, h in got]
        assert [r for r in recs if repr(r) not in anywhere] == want.get(p, []), p
        got_all += recs
    assert len(got_all) == len(first) + len(second)
    assert {repr(r) for r in got_all} >= anywhere
    # the data source reads the same records (headers included)
    df = (
        spark.read.format("seglake")
        .option("subscribePattern", ".*")
        .option("includeHeaders", "true")
        .load(root)
    )
    back = sorted(
        (
            r.ms,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(h.key, bytes(h.value)) for h in (r.headers or [])],
            r.timestampType,
        )
        for r in df.selectExpr("*", "unix_millis(timestamp) AS ms").collect()
    )
    assert back == sorted((*r, 0) for r in got_all)  # CreateTime
    assert _staged(root) == []
    for p in range(N_PARTITIONS):  # each segment with its .keyindex (the sink's writers)
        assert check_partition_dir(Path(root) / f"orders-{p}")


def test_timestamps_double_or_absent_and_a_topic_column(spark, tmp_path):
    """A double timestamp is seconds (Spark's cast), a null one or none the write time;
    without the option each row's topic column names its topic."""
    register(spark)
    root = str(tmp_path / "lake")
    df = spark.createDataFrame(
        [("a", b"1", 1767225600.1234), ("b", b"2", None), ("a", b"3", 1767225601.0)],
        "topic string, value binary, timestamp double",
    )
    before = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    df.write.format("seglake").mode("append").save(root)
    after = int(dt.datetime.now(dt.UTC).timestamp() * 1000)
    got = lake_records(root)
    a = got[got.topic == "a"]
    assert a["timestamp"].tolist() == [1767225600123, 1767225601000]
    assert a["value"].tolist() == [b"1", b"3"]
    (b_ts,) = got[got.topic == "b"]["timestamp"].tolist()
    assert before <= b_ts <= after
    spark.createDataFrame([("z",)], "value string").write.format("seglake").option(
        "topic", "c"
    ).mode("append").save(root)
    (c_ts,) = lake_records(root).query("topic == 'c'")["timestamp"].tolist()
    assert c_ts >= after


@pytest.mark.parametrize("mode", ["overwrite", "errorifexists", "ignore", None])
def test_modes_other_than_append_change_nothing(spark, tmp_path, mode):
    """append is tested above; overwrite is refused by seglake, errorifexists (the
    default) and ignore by Spark itself, for any Python data source."""
    register(spark)
    root = str(tmp_path / "lake")
    _write(spark, _rows(50, 2), root)
    version, before = Catalog(root).version(), lake_records(root)
    with pytest.raises(Exception) as info:
        _write(spark, _rows(50, 3), root, mode=mode)
    if mode == "overwrite":
        assert OVERWRITE_REFUSED in str(info.value)
    else:
        assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(info.value)
    assert Catalog(root).version() == version
    assert lake_records(root).equals(before)
    assert _staged(root) == []


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
        ("value string", {}, "topic option required when no 'topic' attribute is present"),
        ("key int, value string", {"topic": "t"}, "key attribute unsupported type int. key must"),
        ("value int", {"topic": "t"}, "value must be a(n) string or binary"),
        ("value string, partition bigint", {"topic": "t"}, "partition must be a(n) int"),
        ("value string, timestamp bigint", {"topic": "t"}, "timestamp must be a(n) double or"),
        ("value string, topic int", {}, "topic attribute unsupported type int"),
        ("value string, headers array<string>", {"topic": "t"}, "headers must be a(n) array<st"),
        ("value string", {"topic": "bad/name"}, "bad/name"),
        ("value string", {"topic": "t", "log.segment.bytes": "x"}, "log.segment.bytes='x'"),
    ],
)
def test_bad_schema_or_option_is_one_line_and_publishes_nothing(
    spark, tmp_path, ddl, options, message
):
    register(spark)
    root = str(tmp_path / "lake")
    _write(spark, _rows(10, 4), root)
    version = Catalog(root).version()
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception) as info:
        df.write.format("seglake").options(**options).mode("append").save(root)
    lines = [ln for ln in str(info.value).splitlines() if message in ln]
    assert lines, str(info.value)[-2000:]
    assert Catalog(root).version() == version and _staged(root) == []


def test_a_null_topic_fails_the_job_and_leaves_nothing(spark, tmp_path):
    register(spark)
    root = str(tmp_path / "lake")
    _write(spark, _rows(10, 5), root)
    version = Catalog(root).version()
    df = spark.createDataFrame([("t", b"1"), (None, b"2")], "topic string, value binary")
    with pytest.raises(Exception, match="null topic present in the data"):
        df.repartition(2).write.format("seglake").mode("append").save(root)
    assert Catalog(root).version() == version
    assert _staged(root) == []  # abort removed the pieces of the attempts that succeeded


def test_a_retried_task_commits_its_records_once(tmp_path):
    """``local[1,2]``: the first attempt of a task dies (SIGKILL, in its Python worker)
    after staging records; the retry's piece is committed, the dead attempt's is removed."""
    messages = generate(3000, seed=41, topics=("r1", "r2"))
    ts = messages["timestamp"].cast(pa.timestamp("ms", "UTC"))
    data = messages.set_column(messages.schema.get_field_index("timestamp"), "timestamp", ts)
    pq.write_table(data, tmp_path / "in.parquet")
    root = str(tmp_path / "lake")
    spec = {
        "root": root,
        "input": str(tmp_path / "in.parquet"),
        "via": "write",
        "conf": {"num.partitions": "2", "log.segment.bytes": "20000", "batch.size": "2048"},
        "master": "local[1,2]",
        "spark_conf": {"spark.local.dir": str(tmp_path / "spark-local")},
    }
    env = {CRASH_AT: "write", CRASH_ONCE: str(tmp_path / "crashed-once")}
    done = run_group(RUNNER, json.dumps(spec), env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "crashed-once").exists(), "the task never died"
    assert json.loads(done.stdout.strip().splitlines()[-1])["committed"]
    assert same_records_as_input(lake_records(root), messages)
    runs = [h.run_id for h in Catalog(root).history() if h.run_id]
    assert len(runs) == 1 and runs[0].startswith("write-"), runs  # one commit
    assert _staged(root) == []
