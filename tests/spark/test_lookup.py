"""lookup() against brute force: every .log of the lake decoded, answers found in pandas.

One lake per module: five ingest runs into the same lake, one per codec, small segments,
non-monotonic CreateTime (seglake.sample's jitter)."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.record.decode import read_log
from seglake.sample import START_MS, generate
from seglake.spark.ingest import ingest
from seglake.spark.lookup import lookup, read_offsets, resolve_timestamps
from seglake.storage.index_cache import IndexCache

pytestmark = pytest.mark.spark
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_RUN = 1500


def build_lake(spark, root: str) -> None:
    for i, codec in enumerate(CODECS):
        msgs = generate(PER_RUN, seed=11 + i, topics=("t1", "t2"),
                        start_ms=START_MS + i * PER_RUN, jitter_ms=1500)
        ingest(spark, spark.createDataFrame(msgs), root, num_partitions=2,
               conf={"log.segment.bytes": "60000", "compression.type": codec,
                     "log.index.interval.bytes": "2048", "batch.size": "2048"})


def brute_force(root: str) -> pd.DataFrame:
    """Every data record of every committed segment, decoded from the whole .log."""
    frames = []
    for r in Catalog(root).segments().to_pylist():
        with open(os.path.join(root, r["path"]), "rb") as f:
            t, _ = read_log(f.read())
        df = t.select(["offset", "timestamp", "key", "value"]).to_pandas()
        df["topic"], df["partition"] = r["topic"], r["partition"]
        frames.append(df)
    return pd.concat(frames).sort_values(["topic", "partition", "offset"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("lookup") / "lake")
    build_lake(spark, root)
    return root, brute_force(root)


def expected_for_timestamp(recs: pd.DataFrame, ts: int):
    hit = recs[recs["timestamp"] >= ts]
    return None if hit.empty else hit.iloc[0]


def test_lake_has_several_segments_and_codecs(lake):
    root, _ = lake
    segs = Catalog(root).segments()
    assert segs.num_rows >= 20
    assert set(segs.column("codec").to_pylist()) >= {0, 1, 2, 3, 4} or len(
        set(segs.column("codec").to_pylist())) >= 4


def test_lookup_matches_brute_force(spark, lake):
    root, recs = lake
    rng = np.random.default_rng(5)
    queries = []
    for (topic, p), g in recs.groupby(["topic", "partition"]):
        offs = g["offset"].to_numpy()
        leo = int(offs.max()) + 1
        for o in rng.choice(offs, 60, replace=False).tolist() + [0, leo - 1, leo, leo + 5]:
            queries.append((topic, int(p), int(o), None))
        ts = g["timestamp"].to_numpy()
        picks = rng.integers(int(ts.min()) - 10, int(ts.max()) + 10, 60).tolist()
        picks += rng.choice(ts, 30).tolist() + [int(ts.max()), int(ts.max()) + 1, -1, -2, -3]
        for t in picks:
            queries.append((topic, int(p), None, int(t)))
    queries += [("t1", 99, 0, None), ("nope", 0, None, 5), ("t1", 0, None, None),
                ("t1", 0, -4, None)]
    qdf = spark.createDataFrame(pd.DataFrame(queries, columns=["topic", "partition", "offset",
                                                                "timestamp"]).astype(
        {"offset": "Int64", "timestamp": "Int64"}))
    out = lookup(spark, root, qdf).toPandas()
    assert len(out) == len(queries)
    by_tp = {k: g.reset_index(drop=True) for k, g in recs.groupby(["topic", "partition"])}
    checked = 0
    for row in out.itertuples(index=False):
        g = by_tp.get((row.topic, row.partition))
        if g is None:
            assert row.status in ("unknown_partition", "invalid_query")
            continue
        leo = int(g["offset"].max()) + 1
        if pd.notna(row.query_offset):
            q = int(row.query_offset)
            if q < 0:
                assert row.status == "invalid_query"
                continue
            hit = g[g["offset"] == q]
            if q >= leo:
                assert row.status == "offset_out_of_range"
            elif hit.empty:
                assert row.status == "no_record_at_offset"
            else:
                assert row.status == "ok", row
                assert row.value == hit["value"].iloc[0] and row.key == hit["key"].iloc[0]
                checked += 1
            continue
        if pd.isna(row.query_timestamp):
            assert row.status == "invalid_query"
            continue
        q = int(row.query_timestamp)
        if q == -1:
            assert row.status == "log_end_offset" and row.offset == leo
            continue
        target = int(g["timestamp"].max()) if q == -3 else q
        exp = g.iloc[0] if q == -2 else expected_for_timestamp(g, target)
        if exp is None:
            assert row.status == "no_record_for_timestamp", row
        else:
            assert row.status == "ok", row
            assert row.offset == exp["offset"], (row, exp)
            assert row.value == exp["value"]
            assert row.timestamp.value // 1_000_000 == exp["timestamp"]
            checked += 1
    assert checked > 300


def test_point_lookup_reads_one_index_interval_and_one_batch(lake):
    root, recs = lake
    cache = IndexCache()
    rows = Catalog(root).segments("t1", 0).to_pylist()
    for r in rows[1:-1:3]:
        seg = cache.segment(root, r["path"], size=r["size_bytes"], run_id=r["run_id"])
        oi = seg.offset_index
        bounds = np.concatenate(([0], oi.positions, [seg.size]))
        interval = int(np.diff(bounds).max())
        _, scan = read_log(open(os.path.join(root, r["path"]), "rb").read())
        max_batch = int(scan.size.max())
        for o in np.linspace(r["base_offset"], r["next_offset"] - 1, 7).astype(int):
            lakefs.IO_STATS.reset()
            t = read_offsets(seg, np.array([o]))
            assert t.column("offset").to_pylist() == [o]
            assert lakefs.IO_STATS.bytes_read <= interval + max_batch + 61, (o, interval)
        # a timestamp lookup of a record's own timestamp: bounded reads too
        ts = int(scan.max_timestamp[len(scan) // 2])
        lakefs.IO_STATS.reset()
        row, found = resolve_timestamps(seg, np.array([ts]))
        assert row[0] == 0
        assert lakefs.IO_STATS.bytes_read <= min(seg.size, 3 * interval + max_batch + 61)
