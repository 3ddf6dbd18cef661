"""Point lookups: seglake lookup vs a Spark join of the queries with the parquet copy.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/lookup.py [--sizes N,N,...]
        [--queries Q] [--dir DIR]

Workload: the lakes of bench/extract.py (N messages each, default 2M, 8M, 32M and 128M; 4
partitions, lz4, 8 MiB segments) and their parquet copies (same records). Q (default
10,000) random queries per kind, the same at every size relative to the log:

* offsets: random (partition, offset); peer: the queries joined with
  ``spark.read.parquet`` on (topic, partition, offset);
* timestamps: a random record's (partition, timestamp), answered as Kafka's
  ``offsetsForTimes`` (the first record with timestamp >= it, often an earlier one under
  non-monotonic CreateTime). Spark has no join for that (it is an as-of join); the peer
  joins on timestamp equality instead: an easier question, so its time is a lower bound
  for an exact peer. seglake's answers are checked against numpy on the parquet copy
  (running maximum of timestamps + searchsorted).

seglake: ``lookup()`` (catalog arrays broadcast; 10,000 queries are one task: one stage,
no exchange, also under the aggregation; the queries grouped by segment, index intervals
read once into one buffer, each file opened once, the answer records found by one walk
over the batches holding them and decoded in one call). Both sides aggregate the
same thing over the answers (count and sum of value lengths, checked equal for offsets).
local[2]; warmed up; best of 5, every round running every case of every size in turn.
Replaces the "## lookup (bench/lookup.py)" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import extract as bx  # bench/extract.py
from results import replace_section

SECTION = "## lookup (bench/lookup.py)"
REPEAT = int(os.environ.get("SEGLAKE_BENCH_REPEAT", "5"))


def queries(root: str, n: int):
    """(offset queries, timestamp queries, expected offsets of the timestamp queries) as
    pandas frames, from the parquet copy."""
    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq

    t = pq.read_table(root + "-parquet", columns=["partition", "offset", "timestamp"])
    part = t.column("partition").to_numpy()
    off = t.column("offset").to_numpy()
    ts = t.column("timestamp").cast("int64").to_numpy() // 1000
    rng = np.random.default_rng(1)
    pick = rng.integers(0, len(off), n)
    by_offset = pd.DataFrame(
        {"topic": bx.TOPIC, "partition": part[pick].astype("int32"), "offset": off[pick]}
    )
    pick = rng.integers(0, len(off), n)  # a record's own timestamp: the join finds it
    by_time = pd.DataFrame(
        {"topic": bx.TOPIC, "partition": part[pick].astype("int32"), "timestamp": ts[pick]}
    )
    expected = np.empty(n, dtype=np.int64)
    for p in np.unique(part):  # offsetsForTimes: first offset whose running max reaches t
        rows = np.flatnonzero(part == p)
        rows = rows[np.argsort(off[rows])]
        running = np.maximum.accumulate(ts[rows])
        mine = np.flatnonzero(by_time["partition"].to_numpy() == p)
        at = np.searchsorted(running, by_time["timestamp"].to_numpy()[mine], side="left")
        expected[mine] = off[rows][at]
    return by_offset, by_time, expected


def lookup_runs(spark, root: str, n: int) -> dict:
    """The timed functions of one lake (answers checked first, and each run once)."""
    import numpy as np
    from pyspark.sql import functions as F

    from seglake.spark.lookup import lookup

    by_offset, by_time, expected = queries(root, n)
    q_off = spark.createDataFrame(by_offset).cache()
    q_ts = (
        spark.createDataFrame(by_time)
        .withColumn("timestamp", F.timestamp_millis("timestamp"))
        .cache()
    )
    q_off.count(), q_ts.count()
    parquet = spark.read.parquet(root + "-parquet")

    def agg(df) -> tuple:
        return tuple(df.agg(F.count("*"), F.sum(F.length("value"))).first())

    def seglake(q):
        return agg(lookup(spark, root, q).filter("status = 'ok'"))

    got = (
        lookup(spark, root, q_ts)
        .select("partition", "query_timestamp", "offset", "status")
        .toPandas()
    )
    exp = by_time.assign(expected=expected)
    merged = got.merge(
        exp, left_on=["partition", "query_timestamp"], right_on=["partition", "timestamp"]
    ).drop_duplicates(["partition", "query_timestamp"])
    assert (merged["status"] == "ok").all() and np.array_equal(
        merged["offset"].to_numpy(), merged["expected"].to_numpy()
    )
    assert seglake(q_off) == agg(q_off.join(parquet, ["topic", "partition", "offset"]))
    runs = {
        "seglake_offsets": lambda: seglake(q_off),
        "join_offsets": lambda: agg(q_off.join(parquet, ["topic", "partition", "offset"])),
        "seglake_timestamps": lambda: seglake(q_ts),
        "join_timestamps": lambda: agg(q_ts.join(parquet, ["topic", "partition", "timestamp"])),
    }
    for fn in runs.values():  # warm up
        fn()
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2000000,8000000,32000000,128000000")
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="build (or reuse) the lakes here, keep them")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = args.dir or tempfile.mkdtemp(prefix="seglake-bench-lookup-")
    spark = bx.session()
    try:
        runs = {}
        for n in sizes:
            bx.build(bx.lake_path(tmp, n), n)
            mine = lookup_runs(spark, bx.lake_path(tmp, n), args.queries)
            runs.update({(n, k): fn for k, fn in mine.items()})
        got = bx.best(runs, repeat=REPEAT)  # every size in every round: alike conditions
        results = [(n, {k: t for (m, k), (t, _) in got.items() if m == n}) for n in sizes]
        text = report(results, args.queries)
        print(text)
        replace_section(text)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    return 0


def report(results: list[tuple[int, dict]], q: int) -> str:
    lines = [
        SECTION,
        "",
        f"`local[2]`, {os.cpu_count()} CPUs shared with other engineers' Spark jobs "
        f"(ratios are within one run; best of {REPEAT}, each round running every case "
        f"of every size in turn); lakes of bench/extract.py; {q:,} random queries per "
        "kind and size. Ratio = join time / seglake time (target >= 10x at the largest "
        "size). Timestamp queries are answered as `offsetsForTimes` by seglake "
        "(checked against numpy) but by an equality join on the Spark side (a lower "
        "bound: Spark has no as-of join).",
        "",
        "| log messages | seglake offsets s | join s | join / seglake | "
        "seglake timestamps s | equality join s | join / seglake |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in results:
        lines.append(
            f"| {n:,} | {r['seglake_offsets']:.2f} | {r['join_offsets']:.2f} | "
            f"**{r['join_offsets'] / r['seglake_offsets']:.1f}x** | "
            f"{r['seglake_timestamps']:.2f} | {r['join_timestamps']:.2f} | "
            f"**{r['join_timestamps'] / r['seglake_timestamps']:.1f}x** |"
        )
    n0, a = results[0]
    flat = "; ".join(
        f"x{n // n0}: seglake offsets {b['seglake_offsets'] / a['seglake_offsets']:.2f}, "
        f"timestamps {b['seglake_timestamps'] / a['seglake_timestamps']:.2f}, join "
        f"{b['join_offsets'] / a['join_offsets']:.2f}"
        for n, b in results[1:]
    )
    if flat:
        lines += ["", f"Flatness, time at xN the log / time at {n0:,} (1.0 = flat): {flat}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
