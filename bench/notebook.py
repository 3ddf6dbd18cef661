"""Notebook API point lookups: ``seglake.open(root).partition(t, p).read(o, 1)`` vs pandas
on the parquet copy of the same messages. No Spark.

    .venv/bin/python bench/notebook.py [--messages N] [--lookups K] [--pictures DIR]

Workload: N messages (default 200,000) of one topic from seglake.sample (100-byte values,
headers, non-monotonic CreateTime), 4 partitions, lz4, 1 MiB segments, written with
``PartitionLog.append`` and committed to the catalog (the Spark ingest writes the same
files). The parquet copy holds the same records (topic, partition, offset, timestamp, key,
value), written by pyarrow in offset order.

Timed per lookup of one random (partition, offset), K lookups (default 2,000) each:

* seglake, warm index: partitions opened and every segment's index read beforehand, the
  looked-up offsets never read before (one ranged read + decode of an index interval);
* seglake, warm cache: the same offsets again (decoded chunk in the lake's LRU cache);
  as arrow and as pandas;
* pandas, in memory: the parquet copy already loaded, boolean filter on partition/offset;
* pandas, read_parquet: ``pd.read_parquet(path, filters=[partition, offset])`` per lookup.

``--pictures DIR`` also saves segments.png, index.png and rate.png of a small sample
lake (the README's pictures). Replaces the "## notebook (bench/notebook.py)" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from results import replace_section

SECTION = "## notebook (bench/notebook.py)"
TOPIC = "orders"


def build_lake(
    root: Path,
    n: int,
    *,
    partitions: int = 4,
    topic: str = TOPIC,
    segment_bytes: int = 1 << 20,
    rate_per_s: float = 1000.0,
    codec: str = "lz4",
    seed: int = 7,
    batch_size: int = 16384,
    index_interval_bytes: int = 4096,
) -> pa.Table:
    """A lake of ``n`` sample messages without Spark; returns the records written
    (topic, partition, offset, timestamp, key, value)."""
    from seglake.config import LogConfig
    from seglake.lake.catalog import Catalog
    from seglake.sample import generate
    from seglake.storage.log import PartitionLog

    msgs = generate(n, seed=seed, topics=(topic,), rate_per_s=rate_per_s)
    rng = np.random.default_rng(seed)
    part = rng.integers(0, partitions, n)
    cfg = LogConfig(
        segment_bytes=segment_bytes,
        compression_type=codec,
        batch_size=batch_size,
        index_interval_bytes=index_interval_bytes,
    )
    written = []
    rows = []
    for p in range(partitions):
        sel = msgs.filter(pa.array(part == p))
        recs = pa.table(
            {
                "offset": pa.array(np.arange(sel.num_rows), pa.int64()),
                "timestamp": sel.column("timestamp"),
                "key": sel.column("key"),
                "value": sel.column("value"),
                "headers": sel.column("headers"),
            }
        )
        d = root / f"{topic}-{p}"
        d.mkdir(parents=True, exist_ok=True)
        log = PartitionLog.open(str(d))
        infos = log.append(recs, config=cfg)
        rows += [i.catalog_row(topic, p, f"{topic}-{p}/{i.base_offset:020d}.log") for i in infos]
        written.append(
            pa.table(
                {
                    "topic": pa.array([topic] * sel.num_rows),
                    "partition": pa.array(np.full(sel.num_rows, p), pa.int32()),
                    "offset": recs.column("offset"),
                    "timestamp": recs.column("timestamp"),
                    "key": recs.column("key"),
                    "value": recs.column("value"),
                }
            )
        )
    schema = pa.schema(
        [
            ("partition", pa.int32()),
            ("index_entries", pa.int32()),
            ("time_index_entries", pa.int32()),
        ]
    )
    table = pa.Table.from_pylist(rows)
    for f in schema:
        table = table.set_column(
            table.schema.get_field_index(f.name), f.name, table.column(f.name).cast(f.type)
        )
    Catalog(str(root)).commit(table, "bench-notebook")
    return pa.concat_tables(written)


def pictures(out: Path) -> list[Path]:
    """segments.png, index.png, rate.png of a small sample lake."""
    import seglake

    with tempfile.TemporaryDirectory() as tmp:
        # small batches and a 16 KiB index interval: the index's sparsity shows
        build_lake(
            Path(tmp),
            30_000,
            partitions=3,
            segment_bytes=600_000,
            rate_per_s=100.0,
            codec="none",
            batch_size=2048,
            index_interval_bytes=16384,
        )
        lake = seglake.open(tmp)
        out.mkdir(parents=True, exist_ok=True)
        figs = {
            "segments.png": lake.plot_segments(TOPIC),
            "index.png": lake.partition(TOPIC, 0).plot_index(),
            "rate.png": lake.plot_rate(TOPIC, bucket="10s"),
        }
        paths = []
        for name, fig in figs.items():
            fig.savefig(out / name, dpi=90)
            paths.append(out / name)
        return paths


def _pct(xs: list[float]) -> tuple[float, float]:
    a = np.array(xs) * 1e6
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def run(n: int, lookups: int) -> dict:
    import pandas as pd

    import seglake

    tmp = Path(tempfile.mkdtemp(prefix="seglake-bench-nb-"))
    try:
        root = tmp / "lake"
        t0 = time.perf_counter()
        records = build_lake(root, n)
        build_s = time.perf_counter() - t0
        pq_path = tmp / "copy.parquet"
        pq.write_table(records, pq_path)
        rng = np.random.default_rng(3)
        parts = records.column("partition").to_numpy()
        idx = rng.integers(0, records.num_rows, lookups)
        queries = [(int(parts[i]), int(records.column("offset")[int(i)].as_py())) for i in idx]

        lake = seglake.open(str(root))
        for p in lake.partitions(TOPIC):  # warm: partitions opened, every index read
            for seg in lake.partition(TOPIC, p).log.segments:
                _ = seg.offset_index
        times: dict[str, list[float]] = {
            k: [] for k in ("index", "cache_arrow", "cache_pandas", "pd_memory", "pd_read_parquet")
        }
        for p, o in queries:
            t = time.perf_counter()
            r = lake.partition(TOPIC, p).read(o, 1, as_="arrow")
            times["index"].append(time.perf_counter() - t)
            assert r.column("offset")[0].as_py() == o
        for p, o in queries:
            t = time.perf_counter()
            r = lake.partition(TOPIC, p).read(o, 1, as_="arrow")
            times["cache_arrow"].append(time.perf_counter() - t)
        for p, o in queries:
            t = time.perf_counter()
            df = lake.partition(TOPIC, p).read(o, 1)
            times["cache_pandas"].append(time.perf_counter() - t)
            assert int(df["offset"].iloc[0]) == o
        mem = pd.read_parquet(pq_path)
        for p, o in queries:
            t = time.perf_counter()
            df = mem[(mem["partition"] == p) & (mem["offset"] == o)]
            times["pd_memory"].append(time.perf_counter() - t)
            assert len(df) == 1
        for p, o in queries[: max(1, lookups // 10)]:
            t = time.perf_counter()
            df = pd.read_parquet(pq_path, filters=[("partition", "==", p), ("offset", "==", o)])
            times["pd_read_parquet"].append(time.perf_counter() - t)
            assert len(df) == 1
        lake_bytes = sum(f.stat().st_size for f in root.rglob("*.log"))
        return {
            "n": n,
            "lookups": lookups,
            "build_s": build_s,
            "segments": len(lake.segments()),
            "lake_mb": lake_bytes / 1e6,
            "parquet_mb": pq_path.stat().st_size / 1e6,
            "pct": {k: _pct(v) for k, v in times.items()},
            "counts": {k: len(v) for k, v in times.items()},
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(r: dict) -> str:
    pct, counts = r["pct"], r["counts"]
    base = pct["cache_arrow"][0]
    rows = [
        ("seglake, warm index (first read of the offset), arrow", "index"),
        ("seglake, warm cache (offset read before), arrow", "cache_arrow"),
        ("seglake, warm cache, pandas", "cache_pandas"),
        ("pandas, parquet copy in memory, boolean filter", "pd_memory"),
        ("pandas, read_parquet with filters per lookup", "pd_read_parquet"),
    ]

    lines = [
        SECTION,
        "",
        f"{os.cpu_count()} CPUs (shared with other jobs: absolute numbers are noisy, ratios "
        f"less so); {r['n']:,} messages of one topic, 4 partitions, lz4, 1 MiB segments "
        f"({r['segments']} segments, {r['lake_mb']:.1f} MB of .log; parquet copy "
        f"{r['parquet_mb']:.1f} MB); one random (partition, offset) per lookup, "
        "`max_records=1`; lake built without Spark in "
        f"{r['build_s']:.0f} s.",
        "",
        "| method | lookups | p50 µs | p99 µs | p50 / seglake warm cache (arrow) |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, k in rows:
        p50, p99 = pct[k]
        lines.append(f"| {label} | {counts[k]:,} | {p50:,.0f} | {p99:,.0f} | {p50 / base:.1f}x |")
    lines += [
        "",
        f"Point lookup, pandas in memory / seglake warm index: "
        f"{pct['pd_memory'][0] / pct['index'][0]:.2f}x; read_parquet / seglake warm "
        f"index: {pct['pd_read_parquet'][0] / pct['index'][0]:.1f}x (p50). "
        "Warm index = partitions opened and .index/.timeindex read, the record's "
        "index interval read and decoded on the lookup; warm cache = that decoded "
        "interval kept in the lake's LRU (64 MiB default). pandas in memory needs "
        "the whole copy in RAM and scans every row per lookup.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--lookups", type=int, default=2_000)
    ap.add_argument("--pictures", type=Path, help="save the README's pictures here too")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    if args.pictures:
        for p in pictures(args.pictures):
            print("wrote", p)
    r = run(args.messages, args.lookups)
    text = report(r)
    print(text)
    if not args.no_write:
        replace_section(text)


if __name__ == "__main__":
    main()
