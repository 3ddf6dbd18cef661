"""Topic configs kept in the lake (``seglake config``) apply in every job that writes:
ingest (DataFrame path and one-pass parquet path), ``ingest_batch``, the stream sink,
compaction's merges, recovery's index rebuilds; with Kafka's precedence (a topic config
over the broker-level setting, a job's topic-level name over both).

Oracles: Kafka's roll rule by brute force (no segment over segment.bytes unless it is
one batch), the batches' codec bits and timestamp types read from the files, and the
files of an ingest under stored configs byte for byte those of an ingest given the
same values explicitly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StructType

from seglake.cli.main import main as seglake_cli
from seglake.lake.catalog import Catalog
from seglake.lake.topic_store import alter_config
from seglake.record.batch import scan_batches
from seglake.spark import compact, ingest_batch
from seglake.spark.ingest import ingest
from seglake.spark.stream_sink import SeglakeStreamWriter, commit_messages, parse_sink_options
from tests.lake_check import lake_records, same_records_as_input

pytestmark = pytest.mark.spark
SMALL = 65536
T0 = 1_767_225_600_000


def _messages(n: int, topics: tuple[str, ...] = ("orders",)) -> pa.Table:
    rng = np.random.default_rng(n)
    return pa.table(
        {
            "topic": [topics[i % len(topics)] for i in range(n)],
            "key": [f"k{i % 97}".encode() for i in range(n)],
            "value": [rng.bytes(20 + i % 300) for i in range(n)],  # incompressible
            "timestamp": [T0 + i for i in range(n)],
        }
    )


def _segments(root: str, topic: str) -> list[dict]:
    return [r for r in Catalog(root).segments().to_pylist() if r["topic"] == topic]


def _bits(root: str, topic: str, mask: int) -> set[int]:
    """``attributes & mask`` of every batch of ``topic`` (7: codec, 8: LogAppendTime)."""
    out: set[int] = set()
    for r in _segments(root, topic):
        out |= set((scan_batches(Path(root, r["path"]).read_bytes()).attributes & mask).tolist())
    return out


def _assert_rolled_at(root: str, topic: str, limit: int) -> None:
    """Kafka's roll rule: a segment is over ``limit`` only if it is one batch."""
    segs = _segments(root, topic)
    assert len(segs) > 1
    for r in segs:
        scan = scan_batches(Path(root, r["path"]).read_bytes())
        assert r["size_bytes"] <= limit or len(scan) == 1, r


def _files(root: str, topic: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        if os.path.basename(dirpath).startswith(f"{topic}-"):
            for n in names:
                out[f"{os.path.basename(dirpath)}/{n}"] = Path(dirpath, n).read_bytes()
    return out


def _empty_lake(root: str, *topics: str, **configs: str) -> None:
    """A lake whose topics exist only in their configs (``seglake config --create``)."""
    Catalog(root).create_if_missing()
    for t in topics:
        sets = [a for k, v in configs.items() for a in ("--set", f"{k.replace('_', '.')}={v}")]
        assert seglake_cli(["config", root, "--topic", t, "--create", *sets]) == 0


@pytest.mark.parametrize("path", ["dataframe", "parquet"])
def test_ingest_applies_the_topics_stored_configs(spark, tmp_path, path) -> None:
    """Issue 25 item 5: segment.bytes, compression.type, message.timestamp.type stored
    for one topic apply to it (and not to the other topic of the same input)."""
    root = str(tmp_path / "lake")
    msgs = _messages(6000, ("orders", "other"))
    _empty_lake(root, "orders", segment_bytes=str(SMALL), compression_type="zstd")
    _empty_lake(root, "other", message_timestamp_type="LogAppendTime")
    if path == "parquet":  # the one-pass path: parquet read directly, no count pass
        pq.write_table(msgs, tmp_path / "in.parquet")
        df = spark.read.parquet(str(tmp_path / "in.parquet"))
    else:
        df = spark.createDataFrame(msgs.to_pandas()).repartition(2)
    ingest(spark, df, root, num_partitions=2, conf={"log.segment.bytes": "1048576"})
    _assert_rolled_at(root, "orders", SMALL)  # the stored config beats --conf log.*
    assert _bits(root, "orders", 7) == {4} and _bits(root, "orders", 8) == {0}  # zstd
    assert len(_segments(root, "other")) == 2  # one segment a partition: 1 GiB by default
    assert _bits(root, "other", 7) == {0} and _bits(root, "other", 8) == {8}  # LogAppendTime
    got = lake_records(root)
    orders = got[got.topic == "orders"]
    assert sorted(orders.timestamp) == [T0 + i for i in range(0, 6000, 2)]  # CreateTime kept
    assert same_records_as_input(
        got[got.topic == "orders"], msgs.filter(pa.compute.equal(msgs["topic"], "orders"))
    )


def test_stored_configs_write_the_bytes_of_explicit_ones(spark, tmp_path) -> None:
    """The same input under stored segment.bytes / index.interval.bytes / segment.index.bytes
    and given them explicitly by --conf: the same files, byte for byte. A job's topic-level
    name (segment.bytes) beats the stored one."""
    msgs = _messages(5000)
    df = spark.createDataFrame(msgs.to_pandas()).coalesce(1)
    stored, given, run = (str(tmp_path / n) for n in ("stored", "given", "run"))
    values = {
        "segment.bytes": str(SMALL),
        "index.interval.bytes": "1024",
        "segment.index.bytes": "120",
    }
    _empty_lake(stored, "orders", **{k.replace(".", "_"): v for k, v in values.items()})
    ingest(spark, df, stored, num_partitions=1, run_id="r")
    Catalog(given).create_if_missing()
    ingest(spark, df, given, num_partitions=1, run_id="r", conf=values)
    assert _files(stored, "orders") == _files(given, "orders")
    assert len(_files(stored, "orders")) > 9
    _empty_lake(run, "orders", segment_bytes=str(SMALL))
    ingest(spark, df, run, num_partitions=1, conf={"segment.bytes": "200000"})
    _assert_rolled_at(run, "orders", 200000)
    assert max(r["size_bytes"] for r in _segments(run, "orders")) > SMALL


def test_ingest_batch_and_the_stream_sink_apply_them(spark, tmp_path) -> None:
    root = str(tmp_path / "lake")
    msgs = _messages(4000)
    _empty_lake(root, "orders", segment_bytes=str(SMALL), compression_type="lz4")
    df = spark.createDataFrame(msgs.to_pandas())
    ingest_batch(df, 0, root=root, query_id="q", num_partitions=1)
    _assert_rolled_at(root, "orders", SMALL)
    before = len(_segments(root, "orders"))
    # the sink: the tasks' half (write) and the driver's (commit) of one micro-batch
    schema = StructType.fromDDL("topic string, key binary, value binary, timestamp bigint")
    opts = parse_sink_options(
        {"path": root, "queryId": "s", "log.segment.bytes": "1048576"}, schema
    )
    writer = SeglakeStreamWriter(opts)
    piece = writer.write(iter(msgs.to_batches(max_chunksize=500)))
    commit_messages(writer.opts, [piece], 0)
    assert len(_segments(root, "orders")) > before + 3
    _assert_rolled_at(root, "orders", SMALL)
    assert _bits(root, "orders", 7) == {3}  # lz4
    got = lake_records(root)
    assert len(got) == 8000 and (got.offset.values == range(8000)).all()


def test_compaction_merges_by_the_stored_segment_bytes(spark, tmp_path) -> None:
    root = str(tmp_path / "lake")
    msgs = _messages(6000)
    df = spark.createDataFrame(msgs.to_pandas()).coalesce(1)
    ingest(spark, df, root, num_partitions=1, conf={"segment.bytes": "20000"})
    n = len(_segments(root, "orders"))
    alter_config(Catalog(root), "orders", set_={"segment.bytes": str(SMALL)})
    compact(spark, root, merge_only=True, conf={"log.segment.bytes": "1048576"})
    after = _segments(root, "orders")
    assert 1 < len(after) < n
    _assert_rolled_at(root, "orders", SMALL)
