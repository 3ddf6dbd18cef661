"""Time-window extraction: seglake extract vs Spark reading the same messages from parquet.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/extract.py [--messages N] [--growth G]

Workload: N messages (default 2,000,000) of one topic, 4 partitions, 100-byte values,
non-monotonic CreateTime (seglake.sample), lz4, 8 MiB segments; the parquet copy is the
same records (extracted from the lake once, so offsets and partitions agree). Query: a
1% time window in the middle of the log, every column materialised (sum of value
lengths). seglake: ``extract(mode="filter")``; parquet: ``spark.read.parquet`` +
timestamp filter (row-group statistics pruning, but the file is in arrival order so
non-monotonic timestamps widen the row groups). Then the log grows ``G`` times (default
16) and the same-size window (same number of messages) is timed again: flat is 1.0.
local[2]; best of 3 runs each. Replaces the "## extract (bench/extract.py)" section of
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

SECTION = "## extract (bench/extract.py)"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TOPIC = "bench"
CONF = {"log.segment.bytes": str(8 << 20), "compression.type": "lz4"}


def session():
    from seglake.spark.session import get_session

    return get_session("seglake-bench", master="local[2]", quiet=True,
                       conf={"spark.sql.shuffle.partitions": "8",
                             "spark.driver.memory": "4g"})


def build(spark, root: str, n: int, *, chunk: int = 1_000_000) -> None:
    """A lake of ``n`` messages (ingested in runs of ``chunk``) plus its parquet copy."""
    from seglake.sample import START_MS, generate
    from seglake.spark.extract import extract
    from seglake.spark.ingest import ingest

    done = 0
    while done < n:
        k = min(chunk, n - done)
        msgs = generate(k, seed=done + 1, topics=(TOPIC,), start_ms=START_MS + done,
                        headers=False)
        ingest(spark, spark.createDataFrame(msgs), root, num_partitions=4, conf=CONF)
        done += k
    extract(spark, root, TOPIC).write.mode("overwrite").parquet(root + "-parquet")


def best(fn, repeat: int = 3) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def window_times(spark, root: str, n_window: int) -> dict:
    from pyspark.sql import functions as F

    from seglake.sample import START_MS
    from seglake.spark.extract import extract

    # timestamps advance 1 ms per message: the middle window of n_window messages
    total = spark.read.parquet(root + "-parquet").count()
    lo = START_MS + total // 2
    hi = lo + n_window
    lo_ts = F.lit(lo * 1000).cast("timestamp")  # noqa: F841 (documented below)

    def agg(df):
        return df.agg(F.count("*"), F.sum(F.length("value"))).collect()[0]

    def seglake_run():
        return agg(extract(spark, root, TOPIC, start=lo, end=hi, mode="filter"))

    def parquet_run():
        df = spark.read.parquet(root + "-parquet")
        ts_ms = F.unix_millis("timestamp")
        return agg(df.filter((ts_ms >= lo) & (ts_ms < hi)))

    s_t, s_out = best(seglake_run)
    p_t, p_out = best(parquet_run)
    assert tuple(s_out) == tuple(p_out), (s_out, p_out)
    return {"total": total, "rows": s_out[0], "seglake_s": s_t, "parquet_s": p_t}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--growth", type=int, default=16)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    spark = session()
    tmp = args.dir or tempfile.mkdtemp(prefix="seglake-bench-extract-")
    try:
        small, big = os.path.join(tmp, "small"), os.path.join(tmp, "big")
        n_window = args.messages // 100
        t = time.perf_counter()
        build(spark, small, args.messages)
        a = window_times(spark, small, n_window)
        build_s = time.perf_counter() - t
        rows = [("1% window", args.messages, a)]
        b = None
        if args.growth > 1:
            build(spark, big, args.messages * args.growth)
            b = window_times(spark, big, n_window)
            rows.append((f"same window, log x{args.growth}", args.messages * args.growth, b))
        lines = [SECTION, "",
                 f"local[2], {os.cpu_count()} CPUs; {args.messages:,} messages, 4 partitions, "
                 f"lz4, 8 MiB segments; window = {n_window:,} messages (1%); "
                 f"best of 3 (lake build {build_s:.0f} s).", "",
                 "| case | log messages | rows | seglake s | parquet s | parquet / seglake |",
                 "|---|---:|---:|---:|---:|---:|"]
        for name, n, r in rows:
            lines.append(f"| {name} | {n:,} | {r['rows']:,} | {r['seglake_s']:.2f} | "
                         f"{r['parquet_s']:.2f} | {r['parquet_s'] / r['seglake_s']:.2f}x |")
        if b is not None:
            lines += ["", f"Flatness (time at x{args.growth} / time at x1, 1.0 = flat): "
                          f"seglake {b['seglake_s'] / a['seglake_s']:.2f}, "
                          f"parquet {b['parquet_s'] / a['parquet_s']:.2f}."]
        text = "\n".join(lines) + "\n"
        print(text)
        replace_section(text)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    return 0


def replace_section(text: str) -> None:
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(text.replace("\\", "\\\\") + "\n", old) if pattern.search(old) else \
        old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new)


if __name__ == "__main__":
    sys.exit(main())
