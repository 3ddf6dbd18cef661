"""Spark ingest against independent oracles: kafka-python decodes what we wrote, indexes
rebuilt from the .log equal the written ones, murmur2 equals kafka-python's."""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kp_murmur2
from kafka.record.memory_records import MemoryRecords

from seglake.cli.main import main as seglake_cli
from seglake.errors import InputSchemaError, InvalidTopicError, OffsetOrderError, SeglakeError
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.staging import cleanup
from seglake.record.batch import scan_batches
from seglake.sample import generate
from seglake.spark.ingest import ingest
from seglake.storage.index_builder import rebuild_indexes
from tests.key_index_check import check_key_index

pytestmark = pytest.mark.spark


def kafka_python_records(path: str) -> list[tuple]:
    """(offset, timestamp, key, value, headers) of every record, decoded by kafka-python."""
    out = []
    mr = MemoryRecords(Path(path).read_bytes())
    while mr.has_next():
        batch = mr.next_batch()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    return out


def partition_records(root: str, topic: str, partition: int) -> list[tuple]:
    rows = Catalog(root).segments(topic, partition).to_pylist()
    out = []
    for r in rows:
        out += kafka_python_records(os.path.join(root, r["path"]))
    return out


@pytest.fixture(scope="module")
def messages() -> pa.Table:
    return generate(6000, seed=3)


@pytest.fixture(scope="module", params=["always", "never"], ids=["shuffle", "no-shuffle"])
def lake(spark, messages, tmp_path_factory, request):
    """The same messages through both write modes: a shuffle to one task per partition,
    or each input task (3 here) writing its own pieces of every partition."""
    root = str(tmp_path_factory.mktemp("ingest") / "lake")
    result = ingest(
        spark,
        spark.createDataFrame(messages).repartition(3),
        root,
        num_partitions=3,
        conf={
            "log.segment.bytes": "30000",
            "compression.type": "lz4",
            "log.index.interval.bytes": "2048",
            "seglake.ingest.shuffle": request.param,
        },
    )
    return root, result


def test_written_partitions_decode_with_kafka_python_to_the_input(spark, lake, messages):
    root, result = lake
    assert result.committed and result.records == messages.num_rows
    # input order is the order of the repartitioned DataFrame's rows
    df = spark.createDataFrame(messages).repartition(3).toPandas()
    keys = df["key"].tolist()
    df["partition"] = [(kp_murmur2(k) & 0x7FFFFFFF) % 3 for k in keys]  # Kafka's partitioner
    for (topic, p), g in df.groupby(["topic", "partition"]):
        got = partition_records(root, topic, p)
        # offsets assigned from 0 in input order
        assert [r[0] for r in got] == list(range(len(g)))
        assert [r[1] for r in got] == g["timestamp"].tolist()
        assert [r[2] for r in got] == g["key"].tolist()
        assert [r[3] for r in got] == g["value"].tolist()
        assert [r[4] for r in got] == [[(h["key"], h["value"]) for h in hs] for hs in g["headers"]]


def test_indexes_equal_a_rebuild_and_pass_sanity_checks(lake, capsys):
    root, _ = lake
    rows = Catalog(root).segments().to_pylist()
    assert len(rows) > 9, "small log.segment.bytes must roll"
    for r in rows:
        log_path = os.path.join(root, r["path"])
        buf = Path(log_path).read_bytes()
        assert len(buf) == r["size_bytes"] <= 30000
        oi, ti = rebuild_indexes(scan_batches(buf), r["base_offset"], 2048)
        stem = log_path[:-4]
        assert Path(stem + ".index").read_bytes() == oi.to_bytes()
        assert Path(stem + ".timeindex").read_bytes() == ti.to_bytes()
        assert r["index_entries"] == len(oi) and r["time_index_entries"] == len(ti)
        check_key_index(log_path)  # written by the ingest task's SegmentWriter
    files = glob.glob(os.path.join(root, "*", "*.index")) + glob.glob(
        os.path.join(root, "*", "*.timeindex")
    )
    assert seglake_cli(["dump", "--index-sanity-check", *files]) == 0
    out = capsys.readouterr().out  # an index with no entry "is empty.", as Kafka says
    assert out.count("passed sanity check") + out.count("is empty.") == len(files)
    assert seglake_cli(["dump", "--verify-index-only", *files]) == 0
    assert capsys.readouterr().err == ""  # no mismatch reported


def test_catalog_rows_describe_the_segments(lake):
    root, _ = lake
    seg = Catalog(root).segments().to_pandas()
    for (_, _), g in seg.groupby(["topic", "partition"]):
        assert g["base_offset"].iloc[0] == 0
        assert (g["base_offset"].to_numpy()[1:] == g["next_offset"].to_numpy()[:-1]).all()
        assert (g["next_offset"] - g["base_offset"] == g["record_count"]).all()
    assert set(seg["codec"]) == {"lz4"}
    assert set(seg["index_interval_bytes"]) == {2048}  # recover rebuilds with it
    # the run's staging directory is gone (the shared _staging/ parent may stay)
    assert os.listdir(os.path.join(root, "_staging")) == []


def test_rerun_of_a_committed_run_id_is_a_noop(spark, lake, messages):
    root, first = lake
    version = Catalog(root).version()
    again = ingest(
        spark, spark.createDataFrame(messages), root, run_id=first.run_id, num_partitions=3
    )
    assert again.already_committed and not again.committed
    assert "already committed" in again.summary()
    assert Catalog(root).version() == version


def test_second_run_appends_with_continuous_offsets(spark, tmp_path):
    root = str(tmp_path / "lake")
    msgs = generate(1500, topics=("t",), seed=5)
    ingest(spark, spark.createDataFrame(msgs.slice(0, 1000)), root, num_partitions=2)
    leo = Catalog(root).log_end_offsets()
    ingest(spark, spark.createDataFrame(msgs.slice(1000)), root, num_partitions=2)
    for p in range(2):
        got = partition_records(root, "t", p)
        assert [r[0] for r in got] == list(range(len(got)))
        assert len(got) > leo[("t", p)]
    assert sum(len(partition_records(root, "t", p)) for p in range(2)) == 1500


def test_given_offsets_are_kept_and_checked(spark, tmp_path):
    root = str(tmp_path / "lake")
    pdf = pd.DataFrame(
        {
            "topic": "o",
            "partition": 0,
            "offset": [10, 12, 15, 16],
            "value": [b"a", b"b", b"c", b"d"],
        }
    )
    ingest(spark, spark.createDataFrame(pdf.sample(frac=1, random_state=1)), root)
    assert [r[0] for r in partition_records(root, "o", 0)] == [10, 12, 15, 16]
    with pytest.raises(OffsetOrderError, match=r"o-0: input offset 16 is below .* 17"):
        ingest(spark, spark.createDataFrame(pdf.iloc[3:]), root)
    dup = pd.DataFrame(
        {"topic": "o", "partition": 0, "offset": [20, 20, 21], "value": [b"x", b"y", b"z"]}
    )
    with pytest.raises(OffsetOrderError, match="offsets repeat"):
        ingest(spark, spark.createDataFrame(dup), root)
    assert [r[0] for r in partition_records(root, "o", 0)] == [10, 12, 15, 16]


def test_hot_partition_is_split_across_tasks(spark, tmp_path):
    root = str(tmp_path / "lake")
    msgs = generate(3000, topics=("hot",), seed=9)
    result = ingest(
        spark,
        spark.createDataFrame(msgs),
        root,
        topic=None,
        num_partitions=1,
        conf={"seglake.ingest.task.max.records": "1000"},
    )
    seg = result.segments.to_pandas()
    assert len(seg) >= 3  # each of the 3 chunks writes whole segments
    assert [r[0] for r in partition_records(root, "hot", 0)] == list(range(3000))
    assert [r[3] for r in partition_records(root, "hot", 0)] == msgs["value"].to_pylist()


def test_index_full_rolls(spark, tmp_path):
    root = str(tmp_path / "lake")
    msgs = generate(2000, topics=("ix",), seed=2)
    ingest(
        spark,
        spark.createDataFrame(msgs),
        root,
        num_partitions=1,
        conf={
            "log.index.interval.bytes": "0",
            "log.index.size.max.bytes": "40",
            "batch.size": "1024",
        },
    )
    seg = Catalog(root).segments().to_pandas()
    assert len(seg) > 3
    assert (seg["index_entries"] <= 5).all() and (seg["time_index_entries"] <= 3).all()
    assert [r[0] for r in partition_records(root, "ix", 0)] == list(range(2000))


@pytest.mark.parametrize("mode", ["always", "never"])
def test_failed_task_leaves_nothing_after_cleanup(spark, tmp_path, messages, mode):
    root = str(tmp_path / "lake")
    with pytest.raises(Exception, match="fail_after_records"):
        ingest(
            spark,
            spark.createDataFrame(messages),
            root,
            num_partitions=2,
            run_id="doomed",
            fail_after_records=100,
            conf={"seglake.ingest.shuffle": mode, "batch.size": "1024"},
        )
    assert not Catalog(root).exists() or Catalog(root).segments().num_rows == 0
    cleanup(LakeHandle.open(root))
    leftovers = [
        f for f in glob.glob(os.path.join(root, "**", "*.*"), recursive=True) if "_catalog" not in f
    ]
    assert leftovers == []


def test_bad_inputs_give_clear_errors(spark, tmp_path):
    root = str(tmp_path / "lake")
    with pytest.raises(InputSchemaError, match=r"unknown column\(s\) \['payload'\]"):
        ingest(spark, spark.createDataFrame(pd.DataFrame({"payload": [b"x"]})), root, topic="t")
    with pytest.raises(InputSchemaError, match="no 'value' column"):
        ingest(spark, spark.createDataFrame(pd.DataFrame({"key": [b"x"]})), root, topic="t")
    with pytest.raises(InputSchemaError, match=r"wrong type for timestamp: double"):
        ingest(
            spark,
            spark.createDataFrame(pd.DataFrame({"value": [b"x"], "timestamp": [1.5]})),
            root,
            topic="t",
        )
    with pytest.raises(InvalidTopicError, match=r"\['/'\]"):
        ingest(spark, spark.createDataFrame(pd.DataFrame({"value": [b"x"]})), root, topic="../etc")
    bad_topic = pd.DataFrame({"topic": ["ok", "b a d"], "partition": [0, 0], "value": [b"1", b"2"]})
    with pytest.raises(InvalidTopicError, match="b a d"):
        ingest(spark, spark.createDataFrame(bad_topic), root)
    assert not os.path.exists(root) or sorted(os.listdir(root)) in (
        [],
        ["_catalog"],
        ["_catalog", "_staging"],
    )


def test_string_values_and_spark_timestamps(spark, tmp_path):
    root = str(tmp_path / "lake")
    pdf = pd.DataFrame(
        {
            "key": ["k1", None],
            "value": ["héllo", "w"],
            "timestamp": pd.to_datetime([1_700_000_000_123, 1_700_000_000_001], unit="ms"),
        }
    )
    ingest(spark, spark.createDataFrame(pdf), root, topic="s", num_partitions=1)
    got = partition_records(root, "s", 0)
    assert [(r[1], r[2], r[3]) for r in got] == [
        (1_700_000_000_123, b"k1", "héllo".encode()),
        (1_700_000_000_001, None, b"w"),
    ]
    # no timestamp column: LogAppendTime, one append time for the whole run
    ingest(
        spark,
        spark.createDataFrame(pd.DataFrame({"value": [b"a", b"b"]})),
        root,
        topic="lat",
        num_partitions=1,
    )
    rows = Catalog(root).segments("lat").to_pylist()
    scan = scan_batches(Path(root, rows[0]["path"]).read_bytes())
    assert (scan.attributes & 0x08).all()
    assert np.unique(scan.max_timestamp).size == 1


def test_parquet_input_through_the_job_runner(spark, tmp_path, messages):
    """Files declare nested fields nullable (unlike Arrow tables from memory)."""
    import pyarrow.parquet as pq

    from seglake.cli.jobargs import ingest_parser
    from seglake.spark.jobs import run_ingest

    src = tmp_path / "in.parquet"
    pq.write_table(messages.slice(0, 500), src)
    root = str(tmp_path / "lake")
    args = ingest_parser().parse_args(
        ["--input", str(src), "--root", root, "--num-partitions", "1", "--conf", "batch.size=2048"]
    )
    assert run_ingest(spark, args) == 0
    got = []
    for t in ("clicks", "orders", "sensor.readings"):
        got += [(r[3], r[4]) for r in partition_records(root, t, 0)]
    want = messages.slice(0, 500).to_pandas()
    assert sorted(got) == sorted(
        zip(
            want["value"],
            [[(h["key"], h["value"]) for h in hs] for hs in want["headers"]],
            strict=True,
        )
    )


def test_a_run_that_loses_the_race_publishes_nothing(spark, tmp_path, monkeypatch):
    """Two runs plan from the same log end offset; the second to commit fails clearly and
    neither loses data: the winner's segments stay, the loser's files never land."""
    from seglake.errors import ConcurrentRunError

    root = str(tmp_path / "lake")
    msgs = generate(800, topics=("race",), seed=11)
    winner = ingest(spark, spark.createDataFrame(msgs.slice(0, 400)), root, num_partitions=1)
    before = partition_records(root, "race", 0)
    # the loser read the catalog before the winner committed: it saw an empty partition
    monkeypatch.setattr(Catalog, "log_end_offsets", lambda self, *a, **k: {})
    with pytest.raises(ConcurrentRunError, match="race-0"):
        ingest(
            spark, spark.createDataFrame(msgs.slice(400)), root, num_partitions=1, run_id="loser"
        )
    monkeypatch.undo()
    assert partition_records(root, "race", 0) == before
    assert {r["run_id"] for r in Catalog(root).segments().to_pylist()} == {winner.run_id}
    assert not os.path.exists(os.path.join(root, "_staging", "loser"))
    names = sorted(os.listdir(os.path.join(root, "race-0")))
    assert names == sorted(
        os.path.basename(r["path"])[:-4] + s
        for r in Catalog(root).segments().to_pylist()
        for s in (".log", ".index", ".timeindex", ".keyindex")
    )


def test_shuffle_keys_land_one_chunk_per_task(spark):
    """task_keys() inverts Spark's hash partitioning: chunk c's key goes to task c."""
    import pyspark.sql.functions as F

    from seglake.spark.ingest_keys import spark_hash_int, task_keys

    ints = [0, 1, -1, 42, 2**31 - 1, -(2**31), 123456789]
    got = spark.createDataFrame([(i,) for i in ints], "k int").select(F.hash("k")).collect()
    assert [r[0] for r in got] == [spark_hash_int(i) for i in ints]
    for n in (1, 7, 24):
        keys = task_keys(n)
        placed = (
            spark.createDataFrame([(int(k), c) for c, k in enumerate(keys)], "k int, c int")
            .repartition(n, "k")
            .select(F.spark_partition_id().alias("task"), "c")
            .collect()
        )
        assert sorted((r["task"], r["c"]) for r in placed) == [(c, c) for c in range(n)]


def test_timestamp_order_assigns_offsets_by_timestamp(spark, tmp_path):
    root = str(tmp_path / "lake")
    msgs = generate(1200, topics=("ts",), seed=4, jitter_ms=5000)
    ingest(
        spark,
        spark.createDataFrame(msgs).repartition(2),
        root,
        num_partitions=2,
        conf={"seglake.ingest.order": "timestamp", "batch.size": "2048"},
    )
    df = spark.createDataFrame(msgs).repartition(2).toPandas()
    df["partition"] = [(kp_murmur2(k) & 0x7FFFFFFF) % 2 for k in df["key"]]
    for p, g in df.groupby("partition"):
        want = g.sort_values("timestamp", kind="stable")  # ties keep input order
        got = partition_records(root, "ts", p)
        assert [r[0] for r in got] == list(range(len(g)))
        assert [(r[1], r[3]) for r in got] == list(
            zip(want["timestamp"], want["value"], strict=True)
        )


def test_null_keys_spread_over_partitions_without_a_shuffle(spark, tmp_path):
    root = str(tmp_path / "lake")
    pdf = pd.DataFrame({"value": [f"v{i}".encode() for i in range(4000)]})
    result = ingest(
        spark,
        spark.createDataFrame(pdf).repartition(2),
        root,
        topic="nk",
        num_partitions=4,
        conf={"seglake.ingest.shuffle": "auto", "seglake.ingest.local.min.records": "100"},
    )
    counts = [len(partition_records(root, "nk", p)) for p in range(4)]
    assert counts == [1000] * 4  # round robin: each task's nulls cycle the partitions
    seg = result.segments.to_pandas()
    assert len(seg) == 8  # no shuffle: each of the 2 input tasks wrote a piece of each
    values = sorted(r[3] for p in range(4) for r in partition_records(root, "nk", p))
    assert values == sorted(pdf["value"])


def test_delta_input_is_read_from_its_files(spark, tmp_path, messages):
    """--input-format delta without delta-spark: the table's current files only."""
    from deltalake import write_deltalake

    from seglake.cli.jobargs import ingest_parser
    from seglake.spark.jobs import run_ingest

    src = str(tmp_path / "in_delta")
    write_deltalake(src, messages.slice(0, 300))
    write_deltalake(src, messages.slice(300, 200), mode="overwrite")  # 300 rows replaced
    root = str(tmp_path / "lake")
    args = ingest_parser().parse_args(
        ["--input", src, "--input-format", "delta", "--root", root, "--num-partitions", "1"]
    )
    assert run_ingest(spark, args) == 0
    got = sorted(
        r[3] for t in ("clicks", "orders", "sensor.readings") for r in partition_records(root, t, 0)
    )
    assert got == sorted(messages.slice(300, 200).column("value").to_pylist())


def test_next_run_removes_staged_files_of_dead_runs_only(spark, tmp_path):
    root = tmp_path / "lake"
    ingest(spark, spark.createDataFrame(pd.DataFrame({"value": [b"a"]})), str(root), topic="g")
    dead, live = root / "_staging" / "dead" / "g-0", root / "_staging" / "live" / "g-0"
    for d in (dead, live):
        d.mkdir(parents=True)
        (d / "00000000000000000001.log").write_bytes(b"x" * 10)
    two_hours_ago = time.time() - 7200
    for path in (dead / "00000000000000000001.log", dead, dead.parent):
        os.utime(path, (two_hours_ago, two_hours_ago))
    ingest(spark, spark.createDataFrame(pd.DataFrame({"value": [b"b"]})), str(root), topic="g")
    assert sorted(os.listdir(root / "_staging")) == ["live"]  # a run that may still write
    assert [r[3] for r in partition_records(str(root), "g", 0)] == [b"a", b"b"]


def test_rows_whose_staged_files_vanished_are_not_committed(tmp_path):
    import pyarrow.fs as pafs

    from seglake.errors import SeglakeError
    from seglake.lake.staging import check_staged as _check_staged

    staging = tmp_path / "_staging" / "r1"
    (staging / "t-0").mkdir(parents=True)
    for suffix in (".log", ".index", ".timeindex"):
        (staging / "t-0" / f"00000000000000000000{suffix}").write_bytes(b"")
    rows = pa.table({"path": ["t-0/00000000000000000000.log"]})
    _check_staged(pafs.LocalFileSystem(), str(staging), rows, "r1")  # all there
    (staging / "t-0" / "00000000000000000000.timeindex").unlink()
    with pytest.raises(
        SeglakeError,
        match=r"run r1: 1 staged file\(s\) disappeared .*"
        r"00000000000000000000\.timeindex",
    ):
        _check_staged(pafs.LocalFileSystem(), str(staging), rows, "r1")


def test_reused_run_id_with_other_input_is_refused(spark, tmp_path, messages):
    """Issue 16.3: reusing a run id for other input silently ingested nothing. The commit
    records what the run covered; a reuse with other input fails, naming both."""
    import json

    import pyarrow.parquet as pq

    from seglake.errors import RunReuseError

    root = str(tmp_path / "lake")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(messages.slice(0, 300), a)
    pq.write_table(messages.slice(300, 300), b)
    assert ingest(spark, spark.read.parquet(str(a)), root, run_id="daily").committed
    version = Catalog(root).version()
    assert ingest(spark, spark.read.parquet(str(a)), root, run_id="daily").already_committed
    with pytest.raises(RunReuseError) as err:
        ingest(spark, spark.read.parquet(str(b)), root, run_id="daily")
    msg = str(err.value)
    assert f"run id 'daily' committed catalog version {version} for 1 file(s)" in msg
    assert "a.parquet" in msg and "b.parquet" in msg and "\n" not in msg
    assert Catalog(root).version() == version
    (record,) = [h for h in Catalog(root).history() if h.run_id == "daily"]
    assert json.loads(record.metadata["seglake.input"])["records"] == 300
    # in-memory input (no files): compared by its records, however the input is split
    df = spark.createDataFrame(messages.slice(0, 200))
    mem = ingest(spark, df, root, run_id="mem", num_partitions=2)
    assert ingest(spark, df.repartition(3), root, run_id="mem", num_partitions=2).already_committed
    other = spark.createDataFrame(messages.slice(200, 50))
    with pytest.raises(RunReuseError, match=r"run id 'mem' .* 200 record\(s\) .* 50 record"):
        ingest(spark, other, root, run_id="mem", num_partitions=2)
    assert Catalog(root).version() == mem.catalog_version


@pytest.mark.parametrize("mode", ["never", "always"])
def test_driver_held_rows_with_given_partitions(spark, tmp_path, mode):
    """A pandas DataFrame is a local relation: Spark evaluates ``spark_partition_id()`` of
    a projection over it on the driver (0 for every row) while the write runs it in two
    tasks, so the count pass must count it as the write sees it (was a KeyError)."""
    root = str(tmp_path / "lake")
    n = 40
    pdf = pd.DataFrame(
        {
            "topic": ["cl"] * n,
            "partition": np.array([i % 3 for i in range(n)], dtype="int32"),
            "value": [f"v{i}".encode() for i in range(n)],
        }
    )
    df = spark.createDataFrame(pdf)
    assert df.rdd.getNumPartitions() > 1  # the rows are split over tasks
    result = ingest(spark, df, root, conf={"seglake.ingest.shuffle": mode})
    assert result.committed and result.records == n
    for p in range(3):
        got = partition_records(root, "cl", p)
        assert [r[0] for r in got] == list(range(len(got)))
        assert [r[3] for r in got] == [f"v{i}".encode() for i in range(p, n, 3)]
    nulls = pdf.assign(partition=pd.array([None] + [0] * (n - 1), dtype="Int32"))
    with pytest.raises(SeglakeError, match="1 input rows have a null"):
        ingest(spark, spark.createDataFrame(nulls), str(tmp_path / "other"))
