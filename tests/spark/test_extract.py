"""extract() against brute force: every .log decoded, ranges selected in pandas.

The lake is the session's query lake (five ingest runs, one per codec, non-monotonic
CreateTime)."""

from __future__ import annotations

import collections
import itertools
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake import fs as lakefs
from seglake.lake.catalog import Catalog
from seglake.lake.rows import segment_ref
from seglake.lake.scan_read import iter_splits, keep_rows, read_split, read_splits
from seglake.record.batch import scan_batches
from seglake.record.reader import read_log
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark.extract import extract
from seglake.spark.extract_plan import ExtractOptions, parse_time, plan_extract
from seglake.storage.index_cache import IndexCache
from seglake.storage.segment import Window
from seglake.storage.tail_minima import TAIL_TYPE
from seglake.storage.window_records import min_timestamps

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lake(query_lake):
    return query_lake


def kafka_offsets_for_time(g: pd.DataFrame, ts: int | None, default: int) -> int:
    if ts is None:
        return default
    hit = g[g["timestamp"] >= ts]
    return int(hit["offset"].iloc[0]) if len(hit) else int(g["offset"].max()) + 1


def test_parse_time():
    assert parse_time("1767225600000") == 1767225600000
    assert parse_time("2026-01-01T00:00:00Z") == 1767225600000
    assert parse_time("2026-01-01T00:00:00") == 1767225600000


@pytest.mark.parametrize("split_bytes", [4096, 1 << 20])
def test_extract_modes_match_brute_force(spark, lake, split_bytes):
    root, recs = lake
    t1 = recs[recs["topic"] == "t1"]
    lo_ts, hi_ts = int(t1["timestamp"].quantile(0.3)), int(t1["timestamp"].quantile(0.45))
    kw = {"split_bytes": split_bytes}
    # 4096: segments are cut at index entries, tasks of about 4 KiB; 1 MiB: one split per
    # segment, all packed into one task (read and decoded together)
    for mode in ("offsets", "filter"):
        df = extract(spark, root, "t1", start=lo_ts, end=str(hi_ts), mode=mode, **kw)
        splits = plan_extract(
            root, "t1", ExtractOptions(start=lo_ts, end=hi_ts, mode=mode, **kw)
        ).tasks
        tasks = df.rdd.getNumPartitions()
        assert tasks == 1 if split_bytes > 4096 else 1 < tasks <= len(splits)
        assert (
            df.schema.simpleString()
            == spark.createDataFrame(KAFKA_SOURCE_SCHEMA.empty_table()).schema.simpleString()
        )
        got = df.toPandas().sort_values(["partition", "offset"]).reset_index(drop=True)
        parts = []
        for _, g in t1.groupby("partition"):
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
        assert (got["timestamp"].astype("int64") // 1_000_000).tolist() == exp["timestamp"].tolist()
    # offsets and a partition subset; the end past the log end
    got = extract(
        spark, root, "t2", partitions="1", start_offset=100, end_offset=10**9, **kw
    ).toPandas()
    exp = recs[(recs["topic"] == "t2") & (recs["partition"] == 1) & (recs["offset"] >= 100)]
    assert sorted(got["offset"].tolist()) == exp["offset"].tolist()
    # an end with no record >= it: the log end offset
    got = extract(
        spark,
        root,
        "t2",
        start=int(recs["timestamp"].max()) - 50,
        end=int(recs["timestamp"].max()) + 10_000,
        **kw,
    ).count()
    g2 = recs[recs["topic"] == "t2"]
    assert got == sum(
        int(g["offset"].max()) + 1 - kafka_offsets_for_time(g, int(recs["timestamp"].max()) - 50, 0)
        for _, g in g2.groupby("partition")
    )


def test_large_segment_is_split_and_splits_are_disjoint(lake):
    root, _ = lake
    plan = plan_extract(root, "t1", ExtractOptions(split_bytes=4096))
    per_path = collections.Counter(s.path for s in plan.tasks)
    assert max(per_path.values()) > 1
    cache = IndexCache()
    offs = np.concatenate(
        [read_split(cache, root, s).column("offset").to_numpy() for s in plan.tasks]
    )
    total = sum(r["record_count"] for r in Catalog(root).segments("t1").to_pylist())
    assert len(offs) == total


def test_narrow_extraction_reads_its_range_plus_one_interval_and_batch(lake):
    root, recs = lake
    t1 = recs[(recs["topic"] == "t1") & (recs["partition"] == 0)]
    cache = IndexCache()
    rows = Catalog(root).segments("t1", 0).to_pylist()
    for r in rows[1::4]:
        seg = cache.segment(root, segment_ref(r))
        pos = seg.offset_index.positions
        interval = int(np.diff(np.concatenate(([0], pos, [seg.size]))).max())
        with open(os.path.join(root, r["path"]), "rb") as f:
            _, scan = read_log(f.read())
        lo = int(r["base_offset"] + (r["next_offset"] - r["base_offset"]) // 3)
        hi = lo + 5
        # bytes of the batches holding [lo, hi)
        sel = (scan.last_offset >= lo) & (scan.base_offset < hi)
        range_bytes = int(scan.size[sel].sum())
        plan = plan_extract(
            root, "t1", ExtractOptions(partitions=[0], start_offset=lo, end_offset=hi), cache=cache
        )
        lakefs.IO_STATS.reset()
        t = pa.concat_tables([read_split(cache, root, s) for s in plan.tasks])
        assert t.column("offset").to_pylist() == [o for o in t1["offset"] if lo <= o < hi]
        assert lakefs.IO_STATS.bytes_read <= range_bytes + interval + int(scan.size.max()) + 61


@pytest.fixture(scope="module")
def lake_without_tails(lake, tmp_path_factory):
    """A copy of ``lake`` whose catalog rows do not know their tail minima (as a catalog
    written before them)."""
    root, recs = lake
    copy = str(tmp_path_factory.mktemp("no-tails") / "lake")
    shutil.copytree(root, copy)
    cat = Catalog(copy)
    rows = cat.segments()
    k = rows.schema.get_field_index("tail_min_timestamps")
    cat.replace_rows(
        rows.set_column(k, rows.schema.field(k), pa.nulls(rows.num_rows, TAIL_TYPE)), "strip"
    )
    return copy, recs


def test_filter_mode_seeks_with_the_time_index_and_stays_exact(lake, lake_without_tails):
    root, recs = lake
    bare = lake_without_tails[0]
    # the ingest job wrote the tail minima of every segment
    assert Catalog(root).segments().column("tail_min_timestamps").null_count == 0
    cache = IndexCache()
    rng = np.random.default_rng(3)
    t1 = recs[recs["topic"] == "t1"]
    whole = plan_extract(root, "t1", ExtractOptions(mode="filter"), cache=cache).planned_bytes
    seeks = with_tails = without = 0
    for lo_q in rng.uniform(0.05, 0.9, 12):
        lo_ts = int(t1["timestamp"].quantile(lo_q))
        hi_ts = lo_ts + int(rng.integers(1, 2000))
        exp = t1[(t1["timestamp"] >= lo_ts) & (t1["timestamp"] < hi_ts)]
        plans = [
            plan_extract(
                r, "t1", ExtractOptions(start=lo_ts, end=hi_ts, mode="filter"), cache=cache
            )
            for r in (root, bare)
        ]
        for r, plan in zip((root, bare), plans, strict=True):
            got = read_splits(cache, r, plan.tasks).to_pandas()
            assert sorted(zip(got["partition"], got["offset"], strict=True)) == sorted(
                zip(exp["partition"], exp["offset"], strict=True)
            )
            assert plan.planned_bytes < whole and 0 <= plan.tail_bytes <= plan.planned_bytes
        # the tail minima stop the read early: never more bytes than without them
        assert plans[0].planned_bytes <= plans[1].planned_bytes
        with_tails += plans[0].planned_bytes
        without += plans[1].planned_bytes
        seeks += sum(p > 0 for p in (s.start_pos for s in plans[0].tasks))
    # segments shared with older records are entered mid-way (at the time index's floor)
    assert seeks > 0
    # (a little here: the 1.5 s jitter spans several of these 60 KB segments; the unit
    # tests bound the cut against the best batch boundary)
    assert with_tails < without, (with_tails, without)


def test_min_timestamps_match_decoded_records(lake):
    root, _ = lake
    cache = IndexCache()
    parts, expected = [], []
    for r in Catalog(root).segments("t1").to_pylist():
        seg = cache.segment(root, segment_ref(r))
        w = seg.window(0, seg.size)
        sel = np.arange(0, len(w.scan), 2)
        parts.append((w, sel))
        expected.append(
            [
                int(pc.min(w.decode(slice(b, b + 1)).column("timestamp")).as_py())
                for b in sel.tolist()
            ]
        )
    assert min_timestamps(parts).tolist() == [t for e in expected for t in e]
    # a batch whose records do not walk: the smallest int64 (so the caller decodes it,
    # which names the problem); the others are still exact
    k = next(i for i, (w, sel) in enumerate(parts) if not w.scan.codec[sel].any())
    w, sel = parts[k]
    bad = bytearray(w.data)
    at = int(w.scan.position[sel[0]]) + 61
    bad[at : at + 2] = b"\xfe\x7f"  # the first record's length: 8191, past its batch
    got = min_timestamps([(Window(w.start, bytes(bad), w.scan), sel)])
    assert got.tolist() == [-(2**63), *expected[k][1:]]


def test_a_batch_claiming_too_many_records_is_set_aside_without_allocating():
    """A CRC-valid batch whose header counts 60M records in a few bytes: the timestamp
    walk refuses the count before building per-record arrays (as decode does) and still
    reads the batch beside it."""
    import tracemalloc

    from tests.unit.test_decode import raw_batch, raw_record

    good = raw_record(0, 0, b"key", b"value")
    data = raw_batch(good, 60_000_000, last_offset_delta=0) + raw_batch(
        good, 1, base_offset=1, base_ts=7
    )
    w = Window(0, data, scan_batches(data))
    tracemalloc.start()
    try:
        got = min_timestamps([(w, np.arange(2))])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.tolist() == [-(2**63), 7]  # the bad batch: decode it to hear why
    assert peak < 20 << 20, peak


@given(st.lists(st.booleans(), max_size=60), st.integers(0, 3))
@settings(max_examples=200, deadline=None)
def test_keep_rows_is_filter_and_slices_the_longest_run(bits, chunks):
    n = len(bits)
    cut = sorted({0, n, *range(0, n, max(1, n // (chunks + 1)))})
    t = pa.Table.from_batches(
        [
            pa.record_batch(
                {"o": pa.array(range(a, b)), "v": pa.array([b"x%d" % i for i in range(a, b)])}
            )
            for a, b in itertools.pairwise(cut)
        ],
        schema=pa.schema([("o", pa.int64()), ("v", pa.binary())]),
    )
    mask = np.array(bits, dtype=bool)
    got = keep_rows(t, mask)
    assert got.equals(t.filter(pa.array(mask, pa.bool_())))
    if not mask.all():  # no empty chunk: each would be an empty Arrow batch for Spark
        assert all(b.num_rows for b in got.to_batches())
    if n and mask.all():
        assert got is t
    run = np.diff(np.flatnonzero(np.diff(np.concatenate(([0], mask, [0])))))[::2]
    if len(run) == 1 and chunks == 0:  # one run of a one-chunk table: a view, no copy
        assert (
            got.column("v").chunk(0).buffers()[2].address
            == t.column("v").chunk(0).buffers()[2].address
        )


def test_iter_splits_groups_match_read_splits(lake):
    """Decoded group by group (bounded memory), the rows are read_splits' rows."""
    root, recs = lake
    t1 = recs[recs["topic"] == "t1"]
    lo_ts, hi_ts = int(t1["timestamp"].quantile(0.2)), int(t1["timestamp"].quantile(0.7))
    plan = plan_extract(
        root, "t1", ExtractOptions(start=lo_ts, end=hi_ts, mode="filter", split_bytes=4096)
    )
    splits = plan.tasks
    cache = IndexCache()
    groups = list(iter_splits(cache, root, splits, group_bytes=8192))
    assert 1 < len(groups) < len(splits)
    assert pa.concat_tables(groups).equals(read_splits(cache, root, splits))


def test_extract_job_appends_delta_from_the_executors(spark, lake, tmp_path, monkeypatch):
    """--output-format delta without delta-spark: executors write the parquet files into
    the table, one deltalake commit per run adds them; nothing is collected on the driver;
    a second run appends; readers see the Kafka source schema and exactly the rows."""
    from deltalake import DeltaTable

    from seglake.cli.jobargs import extract_parser
    from seglake.spark.jobs import run_extract

    root, recs = lake
    t1 = recs[recs["topic"] == "t1"]
    lo_ts, hi_ts = int(t1["timestamp"].quantile(0.2)), int(t1["timestamp"].quantile(0.3))
    out = str(tmp_path / "out")
    argv = [
        "--root",
        root,
        "--topic",
        "t1",
        "--start",
        str(lo_ts),
        "--end",
        str(hi_ts),
        "--mode",
        "filter",
        "--output",
        out,
        "--output-format",
        "delta",
    ]

    def no_collect(*_a, **_k):
        raise AssertionError("the driver collected the output")

    frame = type(spark.range(1))  # pyspark's classic DataFrame
    for name in ("_collect_as_arrow", "toArrow", "collect", "toPandas"):
        monkeypatch.setattr(frame, name, no_collect)
    for _ in range(2):
        assert run_extract(spark, extract_parser().parse_args(argv)) == 0
    monkeypatch.undo()
    table = DeltaTable(out)
    assert table.version() == 1  # one commit per run
    got = table.to_pyarrow_dataset().to_table(use_threads=False)
    assert got.schema.names == KAFKA_SOURCE_SCHEMA.names
    exp = t1[(t1["timestamp"] >= lo_ts) & (t1["timestamp"] < hi_ts)]
    assert len(exp) > 100
    keys = sorted(
        zip(got.column("partition").to_pylist(), got.column("offset").to_pylist(), strict=True)
    )
    assert keys == sorted(2 * list(zip(exp["partition"], exp["offset"], strict=True)))
    assert sorted(got.column("value").to_pylist()) == sorted(2 * exp["value"].tolist())
    ms = pc.cast(got.column("timestamp"), pa.int64()).to_numpy() // 1000
    assert ((ms >= lo_ts) & (ms < hi_ts)).all()
    # only parquet files the log references are left in the table directory (with
    # delta-spark on the classpath, beside Hadoop's ``.<file>.crc`` checksums)
    referenced = set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())
    on_disk = {
        str(p.relative_to(out))
        for p in Path(out).rglob("*")
        if p.is_file() and "_delta_log" not in p.parts and not p.name.endswith(".crc")
    }
    assert on_disk == referenced and len(referenced) >= 2
