"""extract() against brute force: every .log decoded, ranges selected in pandas.

One lake per module (five ingest runs, one per codec, non-monotonic CreateTime)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.record.decode import read_log
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark.extract import extract, parse_time, plan_extract, read_split
from seglake.storage.index_cache import IndexCache
from tests.spark.test_lookup import brute_force, build_lake

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("extract") / "lake")
    build_lake(spark, root)
    return root, brute_force(root)


def kafka_offsets_for_time(g: pd.DataFrame, ts: int | None, default: int) -> int:
    if ts is None:
        return default
    hit = g[g["timestamp"] >= ts]
    return int(hit["offset"].iloc[0]) if len(hit) else int(g["offset"].max()) + 1


def test_parse_time():
    assert parse_time("1767225600000") == 1767225600000
    assert parse_time("2026-01-01T00:00:00Z") == 1767225600000
    assert parse_time("2026-01-01T00:00:00") == 1767225600000


def test_extract_modes_match_brute_force(spark, lake):
    root, recs = lake
    t1 = recs[recs["topic"] == "t1"]
    lo_ts, hi_ts = int(t1["timestamp"].quantile(0.3)), int(t1["timestamp"].quantile(0.45))
    # small split_bytes: segments are cut at index entries, so splits are exercised
    for mode in ("offsets", "filter"):
        df = extract(spark, root, "t1", start=lo_ts, end=str(hi_ts), mode=mode,
                     split_bytes=4096)
        assert df.schema.simpleString() == spark.createDataFrame(
            KAFKA_SOURCE_SCHEMA.empty_table()).schema.simpleString()
        got = df.toPandas().sort_values(["partition", "offset"]).reset_index(drop=True)
        parts = []
        for p, g in t1.groupby("partition"):
            if mode == "offsets":
                a = kafka_offsets_for_time(g, lo_ts, 0)
                b = kafka_offsets_for_time(g, hi_ts, 0)
                parts.append(g[(g["offset"] >= a) & (g["offset"] < b)])
            else:
                parts.append(g[(g["timestamp"] >= lo_ts) & (g["timestamp"] < hi_ts)])
        exp = pd.concat(parts).sort_values(["partition", "offset"]).reset_index(drop=True)
        assert len(got) == len(exp) > 100, mode
        assert got["offset"].tolist() == exp["offset"].tolist()
        assert got["value"].tolist() == exp["value"].tolist()
        assert (got["timestamp"].astype("int64") // 1_000_000).tolist() == exp[
            "timestamp"].tolist()
    # offsets and a partition subset; the end past the log end
    got = extract(spark, root, "t2", partitions="1", start_offset=100, end_offset=10**9
                  ).toPandas()
    exp = recs[(recs["topic"] == "t2") & (recs["partition"] == 1) & (recs["offset"] >= 100)]
    assert sorted(got["offset"].tolist()) == exp["offset"].tolist()
    # an end with no record >= it: the log end offset
    got = extract(spark, root, "t2", start=int(recs["timestamp"].max()) - 50,
                  end=int(recs["timestamp"].max()) + 10_000).count()
    g2 = recs[recs["topic"] == "t2"]
    assert got == sum(
        int(g["offset"].max()) + 1 - kafka_offsets_for_time(g, int(recs["timestamp"].max()) - 50, 0)
        for _, g in g2.groupby("partition"))


def test_large_segment_is_split_and_splits_are_disjoint(lake):
    root, _ = lake
    plan = plan_extract(root, "t1", split_bytes=4096)
    per_path = plan.splits.group_by("path").aggregate([("start_pos", "count")])
    assert max(per_path.column("start_pos_count").to_pylist()) > 1
    cache = IndexCache()
    offs = np.concatenate([read_split(cache, root, s).column("offset").to_numpy()
                           for s in plan.splits.to_pylist()])
    total = sum(r["record_count"] for r in Catalog(root).segments("t1").to_pylist())
    assert len(offs) == total


def test_narrow_extraction_reads_its_range_plus_one_interval_and_batch(lake):
    root, recs = lake
    t1 = recs[(recs["topic"] == "t1") & (recs["partition"] == 0)]
    cache = IndexCache()
    rows = Catalog(root).segments("t1", 0).to_pylist()
    for r in rows[1::4]:
        seg = cache.segment(root, r["path"], size=r["size_bytes"], run_id=r["run_id"])
        pos = seg.offset_index.positions
        interval = int(np.diff(np.concatenate(([0], pos, [seg.size]))).max())
        _, scan = read_log(open(os.path.join(root, r["path"]), "rb").read())
        lo = int(r["base_offset"] + (r["next_offset"] - r["base_offset"]) // 3)
        hi = lo + 5
        # bytes of the batches holding [lo, hi)
        sel = (scan.last_offset >= lo) & (scan.base_offset < hi)
        range_bytes = int(scan.size[sel].sum())
        plan = plan_extract(root, "t1", partitions=[0], start_offset=lo, end_offset=hi,
                            cache=cache)
        lakefs.IO_STATS.reset()
        t = pa.concat_tables([read_split(cache, root, s) for s in plan.splits.to_pylist()])
        assert t.column("offset").to_pylist() == [o for o in t1["offset"] if lo <= o < hi]
        assert lakefs.IO_STATS.bytes_read <= range_bytes + interval + int(scan.size.max()) + 61
