"""The direct ingest path (parquet read by pyarrow in the tasks) writes exactly what the
DataFrame path writes: same files byte for byte, same catalog rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark.sql.functions as F
import pytest

from seglake.lake.catalog import Catalog
from seglake.sample import generate
from seglake.spark import direct_ingest
from seglake.spark.ingest import ingest
from tests.key_index_check import check_key_index

pytestmark = pytest.mark.spark
CONF = {
    "log.segment.bytes": "60000",
    "compression.type": "lz4",
    "log.index.interval.bytes": "2048",
    "seglake.ingest.shuffle": "never",
}


def _sample(n: int, seed: int) -> pa.Table:
    t = generate(n, seed=seed)
    keys = t["key"].to_numpy(zero_copy_only=False).copy()
    keys[::7] = None  # null keys: round robin from the task's start
    return t.set_column(1, "key", pa.array(keys, pa.binary()))


def _kafka_shape(n: int, seed: int) -> pa.Table:
    """Kafka-source-like columns: string key/value, a UTC timestamp, timestampType,
    string header values with null header lists."""
    t = generate(n, seed=seed)
    rng = np.random.default_rng(seed)
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    headers = [None if i % 5 == 0 else [{"key": "h", "value": f"v{i}"}] for i in range(n)]
    ms = t["timestamp"].to_numpy() - 1_000_000 * (np.arange(n) % 3)
    return pa.table(
        {
            "key": pa.array([f"k{i % 97}" for i in range(n)], pa.string()),
            "value": pa.array([f"value {i}" for i in range(n)], pa.string()),
            "timestamp": pa.array(ms * 1000 + rng.integers(0, 1000, n), pa.timestamp("us", "UTC")),
            "timestampType": pa.array(np.zeros(n, np.int32)),
            "headers": pa.array(headers, hdr),
        }
    )


def _partitioned(n: int, seed: int) -> pa.Table:
    t = generate(n, seed=seed)
    part = np.random.default_rng(seed).integers(0, 3, n).astype(np.int32)
    return pa.table(
        {"topic": t["topic"], "partition": part, "value": t["value"], "timestamp": t["timestamp"]}
    )


def _keyless(n: int, seed: int) -> pa.Table:
    t = generate(n, seed=seed)
    return pa.table({"value": t["value"], "timestamp": t["timestamp"]})


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "_catalog" not in p.parts
    }


def _rows(root: str) -> list[dict]:
    rows = Catalog(root).segments().to_pylist()
    for r in rows:
        r.pop("run_id", None)
        r.pop("committed_at", None)
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["base_offset"]))


@pytest.mark.parametrize(
    "make, kwargs",
    [
        (_sample, {"num_partitions": 3}),
        (_kafka_shape, {"topic": "kafka", "num_partitions": 2}),
        (_partitioned, {}),
        (_keyless, {"topic": "nokey", "num_partitions": 3}),
    ],
    ids=["sample", "kafka-shape", "partition-column", "keyless"],
)
def test_direct_path_writes_the_same_bytes_and_rows(spark, tmp_path, monkeypatch, make, kwargs):
    paths = []
    for i, n in enumerate((9000, 4000)):  # two files, several row groups each
        p = tmp_path / f"in-{i}.parquet"
        pq.write_table(make(n, seed=i + 1), p, row_group_size=1500)
        paths.append(str(p))
    used, counted = [], []
    real, count = direct_ingest.write, direct_ingest.count
    monkeypatch.setattr(direct_ingest, "write", lambda *a: used.append(1) or real(*a))
    monkeypatch.setattr(direct_ingest, "count", lambda *a: counted.append(1) or count(*a))
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(50_000))  # split files mid-way
    try:
        for _ in range(2):  # the second run appends after the first's log end offsets
            used.clear()
            spark.conf.set(direct_ingest.CONF, "false")
            df = spark.read.parquet(*paths)
            slow = ingest(spark, df, str(tmp_path / "df"), conf=CONF, **kwargs)
            assert not used
            spark.conf.set(direct_ingest.CONF, "true")
            splits = direct_ingest.splits(spark.read.parquet(*paths))
            assert splits is not None and len(splits) > len(paths)  # files cut between tasks
            df = spark.read.parquet(*paths)
            fast = ingest(spark, df, str(tmp_path / "pa"), conf=CONF, **kwargs)
            assert used
            # one pass (no count pass, later tasks rebased) unless the input gives partitions
            assert bool(counted) == ("num_partitions" not in kwargs)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset(direct_ingest.CONF)
    assert slow.records == fast.records == 13000
    a, b = _files(tmp_path / "df"), _files(tmp_path / "pa")
    assert len(a) > 6 * len(splits) and a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []  # .keyindex too: rebased pieces' headers
    logs = [k for k in b if k.endswith(".log") and not k.startswith("_")]
    assert len([k for k in b if k.endswith(".keyindex")]) == len(logs)
    for k in logs:
        check_key_index(tmp_path / "pa" / k)
    assert _rows(str(tmp_path / "df")) == _rows(str(tmp_path / "pa"))


def test_other_inputs_keep_the_dataframe_path(spark, tmp_path):
    p = tmp_path / "in.parquet"
    pq.write_table(_sample(100, 1), p)
    df = spark.read.parquet(str(p))
    assert direct_ingest.splits(df) is not None
    assert direct_ingest.splits(df.select("key", "value")) is not None  # pruned scan
    assert direct_ingest.splits(df.filter(F.col("timestamp") > 0)) is None
    assert direct_ingest.splits(df.select(F.col("value").alias("value"), "topic")) is None
    assert direct_ingest.splits(df.repartition(2)) is None
    assert direct_ingest.splits(spark.createDataFrame(_sample(10, 1))) is None
    other = tmp_path / "nokey.parquet"  # Spark reads its keys as nulls: its path decides
    pq.write_table(_sample(10, 2).drop_columns(["key"]), other)
    assert direct_ingest.splits(spark.read.parquet(str(p), str(other))) is None
    ntz = tmp_path / "ntz.parquet"  # zone-less: Spark converts in the session time zone
    pq.write_table(pa.table({"value": [b"x"], "timestamp": pa.array([1], pa.timestamp("us"))}), ntz)
    assert direct_ingest.splits(spark.read.parquet(str(ntz))) is None
