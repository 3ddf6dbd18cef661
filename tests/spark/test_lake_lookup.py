"""``Lake.lookup`` (in process) answers exactly what the Spark ``lookup`` job answers on
the same queries: a lake with several segments, transactions and compaction gaps;
random offsets and timestamps, out of range, before the first and after the last,
Kafka's sentinels, unknown topics and partitions, and timestamps given as strings and
as datetimes."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

import seglake
from seglake.lake.lookup_answer import KEY_LOOKUP_SCHEMA, LOOKUP_SCHEMA
from seglake.spark.lookup import lookup
from tests.unit.test_lake_lookup import TOPIC, Truth, compacted_txn_lake

pytestmark = pytest.mark.spark


def _rows(t: pa.Table, schema: pa.Schema = LOOKUP_SCHEMA) -> list[tuple[str, ...]]:
    """Rows as comparable tuples, sorted (the job keeps no order across tasks)."""
    t = pa.Table.from_arrays(t.select(schema.names).columns, schema=schema)
    return sorted(tuple(repr(v) for v in r.values()) for r in t.to_pylist())


def test_in_process_lookup_equals_the_spark_job(spark, tmp_path) -> None:
    root = tmp_path / "lake"
    compacted_txn_lake(root)
    truth = Truth(str(root))
    rng = np.random.default_rng(7)
    lo, hi = int(truth.e_ts.min()), int(truth.e_ts.max())
    n = 400
    offsets = rng.integers(truth.log_start - 3, truth.log_end + 3, n)
    times = np.concatenate([rng.integers(lo - 100, hi + 100, n), [-1, -2, -3, -4, 0, hi + 1]])
    topics = rng.choice([TOPIC, TOPIC, TOPIC, "nope"], len(offsets) + len(times))
    parts = rng.choice([0, 0, 0, 1], len(topics))
    topics[-6:], parts[-6:] = TOPIC, 0  # the sentinels and edges asked where the log is
    nulls = [None] * len(times)
    queries = pa.table(
        {
            "topic": topics,
            "partition": pa.array(parts, pa.int32()),
            "offset": pa.array([*offsets.tolist(), *nulls], pa.int64()),
            "timestamp": pa.array([*[None] * len(offsets), *times.tolist()], pa.int64()),
        }
    )
    texts = [dt.datetime.fromtimestamp(int(t) / 1000, dt.UTC).isoformat() for t in times[:50]]
    texts += [str(int(t)) for t in times[50:80]] + ["latest", "earliest", "max", "no time"]
    as_strings = pa.table(
        {
            "topic": [TOPIC] * len(texts),
            "partition": pa.array([0] * len(texts), pa.int32()),
            "timestamp": texts,
        }
    )
    us = [int(t) * 1000 + 999 for t in times[:40]] + [-1500, -1000, 0]  # floored; < 1970
    as_datetimes = pa.table(
        {
            "topic": [TOPIC] * len(us),
            "partition": pa.array([0] * len(us), pa.int32()),
            "timestamp": pa.array(us, pa.timestamp("us", tz="UTC")),
        }
    )
    lake = seglake.open(str(root))
    for q in (queries, as_strings, as_datetimes):
        mine = lake.lookup(q)
        job = lookup(spark, str(root), q).toArrow()
        assert _rows(mine) == _rows(job)
    statuses = set(lake.lookup(queries).column("status").to_pylist())
    assert statuses >= {
        "ok",
        "offset_out_of_range",
        "unknown_partition",
        "no_record_for_timestamp",
        "log_end_offset",
        "invalid_query",
    }


def test_key_queries_in_the_job_equal_lake_lookup(spark, tmp_path) -> None:
    """Mixed offset, time and key queries (keys present, absent, null; partition given,
    null, unknown; duplicates): the job's rows equal ``Lake.lookup``'s, all matches and
    the latest per key, and with ``num_tasks`` (the segment-keyed pass)."""
    from tests.unit.test_lake_lookup_keys import _keyed_partition

    root = tmp_path / "lake"
    compacted_txn_lake(root)
    _keyed_partition(root, 1)
    truth = Truth(str(root))
    rng = np.random.default_rng(11)
    keys = sorted(set(truth.data.column("key").to_pylist()) - {None})
    n = 60
    kinds = rng.integers(0, 3, n)
    asked = [*keys[:8], b"absent", None, keys[0]]
    parts, lo, hi = [0, 1, 7], truth.log_start, truth.log_end
    queries = pa.table(
        {
            "topic": rng.choice([TOPIC, TOPIC, TOPIC, "nope"], n),
            "partition": pa.array(
                [None if k == 2 and rng.random() < 0.5 else int(rng.choice(parts)) for k in kinds],
                pa.int32(),
            ),
            "offset": pa.array(
                [int(rng.integers(lo, hi)) if k == 0 else None for k in kinds],
                pa.int64(),
            ),
            "timestamp": pa.array(
                [int(rng.choice(truth.e_ts)) if k == 1 else None for k in kinds], pa.int64()
            ),
            "key": pa.array(
                [asked[int(rng.integers(len(asked)))] if k == 2 else None for k in kinds],
                pa.binary(),
            ),
        }
    )
    edges = pa.table(  # an absent key, a key in every partition, one in partition 1
        {
            "topic": [TOPIC] * 3,
            "partition": pa.array([0, None, 1], pa.int32()),
            "offset": pa.nulls(3, pa.int64()),
            "timestamp": pa.nulls(3, pa.int64()),
            "key": pa.array([b"absent", keys[0], keys[1]], pa.binary()),
        }
    )
    queries = pa.concat_tables([queries, edges.cast(queries.schema)])
    lake = seglake.open(str(root))
    for latest in (False, True):
        mine = lake.lookup(queries, latest_per_key=latest)
        assert set(mine.column("status").to_pylist()) >= {"ok", "no_record_for_key"}
        for tasks in (None, 3):
            job = lookup(spark, str(root), queries, latest_per_key=latest, num_tasks=tasks)
            assert _rows(mine, KEY_LOOKUP_SCHEMA) == _rows(job.toArrow(), KEY_LOOKUP_SCHEMA)


def test_key_columns_become_the_same_bytes_in_spark_and_in_process(spark) -> None:
    """Integer keys (tinyint .. bigint, negatives, nulls), strings and binary: the job's
    ``query_key`` equals ``Lake.lookup``'s (one rule: ``lake/lookup_queries.py``); a float
    key column is the same one line in both."""
    from pyspark.sql import types as T

    from seglake.errors import InputSchemaError
    from seglake.lake.lookup_queries import query_table
    from seglake.spark.lookup_queries import normalize_queries

    cases = [
        (T.ByteType(), pa.int8(), [-128, -1, 0, 7, 127, None]),
        (T.ShortType(), pa.int16(), [-32768, -2, 300, None]),
        (T.IntegerType(), pa.int32(), [-(2**31), -40000, 0, 2**31 - 1, None]),
        (T.LongType(), pa.int64(), [-(2**63), -1, 2**40, 2**63 - 1, None]),
        (T.StringType(), pa.string(), ["k1", "", None]),
        (T.BinaryType(), pa.binary(), [b"\x00\xff", None]),
    ]
    for stype, atype, keys in cases:
        schema = T.StructType([T.StructField("topic", T.StringType()), T.StructField("key", stype)])
        df = spark.createDataFrame([("t", k) for k in keys], schema)
        job = [r["query_key"] for r in normalize_queries(df).collect()]
        mine = query_table(pa.table({"topic": ["t"] * len(keys), "key": pa.array(keys, atype)}))
        assert [None if k is None else bytes(k) for k in job] == mine["query_key"].to_pylist()
    floats = spark.createDataFrame([("t", 1.5)], "topic string, key double")
    with pytest.raises(InputSchemaError, match="key column of type double; expected"):
        normalize_queries(floats)
    with pytest.raises(InputSchemaError, match="key column of type double; expected"):
        query_table(pa.table({"topic": ["t"], "key": [1.5]}))
