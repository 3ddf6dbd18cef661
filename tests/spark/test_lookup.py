"""lookup() against brute force: every .log of the lake decoded, answers found in pandas.

One lake per module: five ingest runs into the same lake, one per codec, small segments,
non-monotonic CreateTime (seglake.sample's jitter)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from seglake import fs as lakefs
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_plan import partition_arrays
from seglake.lake.rows import segment_ref
from seglake.lake.snapshot import Snapshot
from seglake.record.reader import read_log
from seglake.sample import START_MS, generate
from seglake.spark.ingest import ingest
from seglake.spark.lookup import (
    QUERY_SCHEMA,
    answer_queries,
    lookup,
    read_offsets,
    resolve_timestamps,
)
from seglake.storage import point_reads
from seglake.storage.index_cache import IndexCache

pytestmark = pytest.mark.spark
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_RUN = 1500


def build_lake(spark, root: str) -> None:
    for i, codec in enumerate(CODECS):
        msgs = generate(
            PER_RUN,
            seed=11 + i,
            topics=("t1", "t2"),
            start_ms=START_MS + i * PER_RUN,
            jitter_ms=1500,
        )
        ingest(
            spark,
            spark.createDataFrame(msgs),
            root,
            num_partitions=2,
            conf={
                "log.segment.bytes": "60000",
                "compression.type": codec,
                "log.index.interval.bytes": "2048",
                "batch.size": "2048",
            },
        )


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
def lake(query_lake):
    return query_lake


def expected_for_timestamp(recs: pd.DataFrame, ts: int):
    hit = recs[recs["timestamp"] >= ts]
    return None if hit.empty else hit.iloc[0]


def test_lake_has_several_segments_and_codecs(lake):
    root, _ = lake
    segs = Catalog(root).segments()
    assert segs.num_rows >= 20
    assert (
        set(segs.column("codec").to_pylist()) >= {0, 1, 2, 3, 4}
        or len(set(segs.column("codec").to_pylist())) >= 4
    )


@pytest.mark.parametrize("shuffle", [False, True], ids=["one-pass", "by-segment"])
def test_lookup_matches_brute_force(spark, lake, shuffle):
    root, recs = lake
    rng = np.random.default_rng(5)
    queries = []
    for (topic, p), g in recs.groupby(["topic", "partition"]):
        offs = g["offset"].to_numpy()
        leo = int(offs.max()) + 1
        for o in [*rng.choice(offs, 60, replace=False).tolist(), 0, leo - 1, leo, leo + 5]:
            queries.append((topic, int(p), int(o), None))
        ts = g["timestamp"].to_numpy()
        picks = rng.integers(int(ts.min()) - 10, int(ts.max()) + 10, 60).tolist()
        picks += [*rng.choice(ts, 30).tolist(), int(ts.max()), int(ts.max()) + 1, -1, -2, -3]
        for t in picks:
            queries.append((topic, int(p), None, int(t)))
    queries += [
        ("t1", 99, 0, None),
        ("nope", 0, None, 5),
        ("t1", 0, None, None),
        ("t1", 0, -4, None),
    ]
    qdf = spark.createDataFrame(
        pd.DataFrame(queries, columns=["topic", "partition", "offset", "timestamp"]).astype(
            {"offset": "Int64", "timestamp": "Int64"}
        )
    )
    # by segment: a shuffle first, and small chunks (several decodes per task)
    kw = {"num_tasks": 3, "chunk_rows": 64} if shuffle else {}
    answers = lookup(spark, root, qdf, **kw)
    if not shuffle:  # a small query set: one task, one stage, no exchange
        assert answers.rdd.getNumPartitions() == 1
        assert "Exchange" not in answers._jdf.queryExecution().executedPlan().toString()
    out = answers.toPandas()
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
            hit = g[g["offset"] >= q].head(1)  # the record there, or the next (a fetch)
            if q >= leo:
                assert row.status == "offset_out_of_range"
            elif hit.empty:
                assert row.status == "no_record_at_offset"
            else:
                assert row.status == "ok", row
                assert row.offset == hit["offset"].iloc[0]
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
    """An offset's read: from its index floor to the second entry after it (the batch at
    the first read whole: a target is most often in it when every batch has an entry),
    so at most two index intervals and a header; bounded for a timestamp too."""
    root, _ = lake
    cache = IndexCache()
    rows = Catalog(root).segments("t1", 0).to_pylist()
    for r in rows[1:-1:3]:
        seg = cache.segment(root, segment_ref(r))
        oi = seg.offset_index
        bounds = np.concatenate(([0], oi.positions, [seg.size]))
        interval = int(np.diff(bounds).max())
        with open(os.path.join(root, r["path"]), "rb") as f:
            _, scan = read_log(f.read())
        max_batch = int(scan.size.max())
        for o in np.linspace(r["base_offset"], r["next_offset"] - 1, 7).astype(int):
            lakefs.IO_STATS.reset()
            t = read_offsets(seg, np.array([o]))
            assert t.column("offset").to_pylist() == [o]
            bound = interval + max(interval, max_batch) + 61
            assert lakefs.IO_STATS.bytes_read <= bound, (o, interval)
        # a timestamp lookup of a record's own timestamp: bounded reads too
        ts = int(scan.max_timestamp[len(scan) // 2])
        lakefs.IO_STATS.reset()
        row, _ = resolve_timestamps(seg, np.array([ts]))
        assert row[0] == 0
        assert lakefs.IO_STATS.bytes_read <= min(seg.size, 3 * interval + max_batch + 61)


def queries_table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(QUERY_SCHEMA.names, r, strict=True)) for r in rows], schema=QUERY_SCHEMA
    )


def test_answers_without_spark_nulls_and_unreadable_segments(lake, tmp_path):
    root, recs = lake
    t1 = recs[(recs["topic"] == "t1") & (recs["partition"] == 0)]
    rows = Catalog(root).segments("t1", 0).to_pylist()
    # a copy of the lake that lost the .log of t1-0's second segment
    copy = str(tmp_path / "lake")
    shutil.copytree(root, copy)
    bad = rows[1]
    os.remove(os.path.join(copy, bad["path"]))
    in_bad = int(bad["base_offset"]) + 1
    good = int(t1["offset"].iloc[-1])
    q = queries_table(
        [
            ("t1", 0, in_bad, None),
            ("t1", 0, good, None),
            ("t1", None, 5, None),
            (None, 0, 5, None),
            ("t1", 0, None, int(t1["timestamp"].max())),
        ]
    )
    parts = partition_arrays(Snapshot.read(LakeHandle.open(copy)))
    out = answer_queries(copy, parts, IndexCache(), q).to_pylist()
    assert [r["status"] for r in out] == [
        "read_error",
        "ok",
        "unknown_partition",
        "unknown_partition",
        "ok",
    ]
    assert out[1]["offset"] == good and out[1]["value"] == t1["value"].iloc[-1]


def test_timestamps_the_index_cannot_place_are_scanned(lake, monkeypatch):
    root, recs = lake
    cache = IndexCache()
    r = Catalog(root).segments("t2", 1).to_pylist()[2]
    seg = cache.segment(root, segment_ref(r))
    g = recs[(recs["topic"] == "t2") & (recs["partition"] == 1)]
    g = g[(g["offset"] >= r["base_offset"]) & (g["offset"] < r["next_offset"])]
    targets = np.sort(np.random.default_rng(2).choice(g["timestamp"].to_numpy(), 40))
    rows, found = resolve_timestamps(seg, targets)

    def place_nothing(reqs, gather):
        for r in reqs:
            r.ids = np.full(len(r.lo), -1, dtype=np.int64)

    monkeypatch.setattr(point_reads, "_locate", place_nothing)
    rows2, found2 = resolve_timestamps(seg, targets)
    assert (
        found.take(pa.array(rows)).column("offset").to_pylist()
        == found2.take(pa.array(rows2)).column("offset").to_pylist()
    )
    for t, o in zip(targets, found.take(pa.array(rows)).column("offset").to_pylist(), strict=True):
        assert o == int(g[g["timestamp"] >= t]["offset"].iloc[0])


def test_nearby_targets_share_one_read(lake):
    root, _ = lake
    cache = IndexCache()
    r = Catalog(root).segments("t1", 1).to_pylist()[2]
    seg = cache.segment(root, segment_ref(r))
    targets = np.arange(r["base_offset"] + 3, r["next_offset"] - 3, 5)
    lakefs.IO_STATS.reset()
    t = read_offsets(seg, targets)
    assert t.column("offset").to_pylist() == targets.tolist()
    assert lakefs.IO_STATS.reads <= 2 and lakefs.IO_STATS.bytes_read <= seg.size + 61


def test_an_index_that_disagrees_with_the_log_is_rebuilt(lake, tmp_path, monkeypatch):
    root, recs = lake
    careful = []
    for name in ("_careful_offsets", "_careful_timestamps"):
        real = getattr(point_reads, name)
        monkeypatch.setattr(
            point_reads, name, lambda *a, real=real, name=name: (careful.append(name), real(*a))[1]
        )
    copy = str(tmp_path / "lake")
    shutil.copytree(root, copy)
    r = Catalog(copy).segments("t2", 0).to_pylist()[2]
    # every entry now points one byte into its batch: the fast path sees no batch header
    # there and hands the segment to the careful path, which rebuilds the index
    path = os.path.join(copy, r["path"][: -len(".log")] + ".index")
    entries = np.fromfile(path, dtype=">i4").reshape(-1, 2)
    entries[:, 1] += 1
    entries.astype(">i4").tofile(path)
    g = recs[(recs["topic"] == "t2") & (recs["partition"] == 0)]
    g = g[(g["offset"] >= r["base_offset"]) & (g["offset"] < r["next_offset"])]
    offs = g["offset"].to_numpy()[::7]
    stamps = g["timestamp"].to_numpy()[::11]
    every = recs[(recs["topic"] == "t2") & (recs["partition"] == 0)]
    parts = partition_arrays(Snapshot.read(LakeHandle.open(copy)))
    for rows, expected in (
        ([("t2", 0, int(o), None) for o in offs], list(offs)),
        (
            [("t2", 0, None, int(t)) for t in stamps],
            [int(every[every["timestamp"] >= t]["offset"].iloc[0]) for t in stamps],
        ),
    ):
        out = answer_queries(copy, parts, IndexCache(), queries_table(rows))  # index as read
        assert set(out.column("status").to_pylist()) == {"ok"}
        assert out.column("offset").to_pylist() == expected
    assert careful == ["_careful_offsets", "_careful_timestamps"]


def test_lookup_job_answers_queries_and_says_what_it_read(spark, lake, tmp_path, capsys):
    """The spark-submit entry point: JSON-lines queries in, JSON out, every query answered
    as brute force says, and a summary line with the bytes and files the tasks read."""
    import json
    import re

    from seglake.cli.jobargs import lookup_parser
    from seglake.spark.jobs import run_lookup

    root, recs = lake
    g = recs[(recs["topic"] == "t2") & (recs["partition"] == 1)].reset_index(drop=True)
    picks = g.iloc[[3, len(g) // 2, len(g) - 1]]
    queries = [{"topic": "t2", "partition": 1, "offset": int(o)} for o in picks["offset"]]
    queries += [
        {"topic": "t2", "partition": 1, "timestamp": int(g["timestamp"].max())},
        {"topic": "t2", "partition": 1, "offset": 10**12},
    ]
    path = tmp_path / "queries.json"
    path.write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert (
        run_lookup(
            spark,
            lookup_parser().parse_args(
                [
                    "--root",
                    root,
                    "--queries",
                    str(path),
                    "--output",
                    out,
                    "--output-format",
                    "parquet",
                ]
            ),
        )
        == 0
    )
    line = capsys.readouterr().out
    got = pd.read_parquet(out).sort_values(["query_offset", "query_timestamp"])
    ok = got[got["status"] == "ok"]
    first_max = int(g[g["timestamp"] == g["timestamp"].max()]["offset"].iloc[0])
    assert sorted(ok["offset"].tolist()) == sorted([*picks["offset"].tolist(), first_max])
    for row in ok.itertuples():
        assert row.value == g[g["offset"] == row.offset]["value"].iloc[0]
    assert got["status"].tolist().count("offset_out_of_range") == 1
    m = re.search(r"read: (\d+) index/log bytes from (\d+) segment file\(s\)", line)
    assert m, line
    # a few batches and index intervals of one partition: far less than its .log files
    log_bytes = sum(r["size_bytes"] for r in Catalog(root).segments("t2", 1).to_pylist())
    assert 0 < int(m.group(1)) < log_bytes / 3 and int(m.group(2)) >= 1


def test_small_query_sets_take_one_task_without_an_exchange(spark, lake):
    """Counted queries (the plan's statistics know): one task per TASK_QUERIES, one
    stage; columns Spark knows are never null are taken too."""
    from seglake.spark import lookup as lk

    root, _ = lake

    def queries(n: int):
        df = spark.range(n, numPartitions=4).selectExpr(
            "'t1' AS topic", "0 AS partition", "id AS offset", "CAST(NULL AS BIGINT) AS timestamp"
        )
        df.cache().count()
        return df

    assert lk._few_tasks(queries(100_000)) == 4
    q = queries(10_000)
    assert lk._few_tasks(q) == 1
    answers = lookup(spark, root, q)
    assert answers.rdd.getNumPartitions() == 1
    assert "Exchange" not in answers._jdf.queryExecution().executedPlan().toString()
    assert answers.count() == 10_000
