"""Time-window extraction: seglake extract vs Spark reading the same messages from parquet.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/extract.py [--messages N] [--growth G]
        [--window PCT] [--repeat R] [--no-floors] [--dir DIR]

Workload: N messages (default 2,000,000) of one topic, 4 partitions, 100-byte values,
non-monotonic CreateTime (seglake.sample: 1 message per ms, +-2 s jitter), lz4, 8 MiB
segments, written without Spark by seglake's SegmentWriter (the files the ingest job
writes). The parquet copy holds the same records in the Spark Kafka source schema,
written by pyarrow as they arrive (one row group per million messages, snappy, page
index on): so a time filter prunes row groups by their statistics and pages by the page
index, the best case for parquet.

Query: the messages of a 1% time window (N/100 ms; ``--window PCT``: PCT% of N) in the
middle of the log, every column. seglake: ``extract(mode="filter")`` (exactly the records
with start <= timestamp < end, as the parquet filter). parquet: ``spark.read.parquet``
filtered on the ``timestamp`` column (pushed down). Both sides deliver the same rows
(checked: count, sum of value lengths and of offsets); timed: (a) ``toArrow()``, every
column of every row collected in the driver, (b) a ``noop`` write, every row
materialised in the JVM. Also Kafka's semantics for the same window
(``mode="offsets"``, rows differ a little). Then the log grows G times (default 16) and
the same window (same number of messages) is timed again.

local[2]; both sides warmed up first; best of 7 runs each (``--repeat``), every round
running every case of both sizes in turn (a busy spell of the shared machine hits all
alike). Replaces the "## extract (bench/extract.py)" section of bench/RESULTS.md, or with
another ``--window`` its own section (issue 14's P3: ``--messages 32000000 --growth 1
--window 10``, 3.2M rows). ``--no-floors`` leaves out the two floor cases.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from results import replace_section

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

SECTION = "## extract (bench/extract.py)"
TOPIC = "bench"
PARTITIONS = 4
CHUNK = 1_000_000
SEGMENT_BYTES = 8 << 20
FLOOR_BATCH = 65536  # rows per Arrow batch of the Python floor's file
REPEAT = int(os.environ.get("SEGLAKE_BENCH_REPEAT", "7"))


def session():
    from seglake.spark.session import get_session

    return get_session(
        "seglake-bench",
        master="local[2]",
        quiet=True,
        conf={"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "4g"},
    )


def build(root: str, n: int) -> float:
    """A lake of ``n`` messages and its parquet copy (``root + "-parquet"``), without
    Spark; reused if already there. Returns the seconds it took."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from seglake.config import LogConfig
    from seglake.record.schema import to_kafka_source
    from seglake.sample import START_MS, generate
    from seglake.storage.writer import SegmentWriter

    if os.path.exists(os.path.join(root, "_catalog")):
        return 0.0
    started = time.perf_counter()
    config = LogConfig(segment_bytes=SEGMENT_BYTES, compression_type="lz4")
    fs = pafs.LocalFileSystem()
    writers = [SegmentWriter(fs, f"{root}/{TOPIC}-{p}", config=config) for p in range(PARTITIONS)]
    infos: list[list] = [[] for _ in range(PARTITIONS)]
    next_offset = [0] * PARTITIONS
    os.makedirs(root + "-parquet", exist_ok=True)
    out = None
    for done in range(0, n, CHUNK):
        k = min(CHUNK, n - done)
        msgs = generate(k, seed=done + 1, topics=(TOPIC,), start_ms=START_MS + done, headers=False)
        part = np.random.default_rng(done + 7).integers(0, PARTITIONS, k)
        chunk = []
        for p in range(PARTITIONS):
            sel = msgs.filter(pa.array(part == p))
            offsets = np.arange(next_offset[p], next_offset[p] + sel.num_rows)
            next_offset[p] += sel.num_rows
            recs = pa.table(
                {
                    "offset": pa.array(offsets, pa.int64()),
                    "timestamp": sel.column("timestamp"),
                    "timestamp_type": pa.array(np.zeros(sel.num_rows, np.int32)),
                    "key": sel.column("key"),
                    "value": sel.column("value"),
                    "headers": sel.column("headers"),
                }
            )
            infos[p] += writers[p].append(recs)
            chunk.append(to_kafka_source(recs, TOPIC, p))
        table = pa.concat_tables(chunk)
        if out is None:
            out = pq.ParquetWriter(
                root + "-parquet/part-0.parquet",
                table.schema,
                compression="snappy",
                write_page_index=True,
            )
        out.write_table(table, row_group_size=CHUNK)
    if out is not None:
        out.close()
    commit_lake(root, TOPIC, writers, infos)
    return time.perf_counter() - started


def commit_lake(root: str, topic: str, writers: list, infos: list[list]) -> None:
    """Close each partition's ``SegmentWriter`` (``writers[p]``, its segments so far in
    ``infos[p]``) and commit every segment to the lake's catalog in one commit."""
    from seglake.lake.catalog import Catalog
    from seglake.lake.rows import rows_table

    rows = []
    for p, w in enumerate(writers):
        infos[p] += w.close()
        rows += [i.catalog_row(topic, p, f"{topic}-{p}/{i.base_offset:020d}.log") for i in infos[p]]
    Catalog(root).commit(rows_table(rows), "bench-build")


def best(fns: dict, repeat: int = 3) -> dict:
    """Best of ``repeat`` seconds (and the last result) of each function, runs interleaved
    so that a busy spell of the shared machine hits every side alike; every other round in
    reverse order (the first Python job after the JVM-only ones ran 0.1-0.3 s slower,
    whichever it was: a fixed order charged that to the same case every round)."""
    times: dict = {k: [] for k in fns}
    outs: dict = {}
    cases = list(fns.items())
    for r in range(repeat):
        for k, fn in cases if r % 2 == 0 else cases[::-1]:
            t = time.perf_counter()
            outs[k] = fn()
            times[k].append(time.perf_counter() - t)
    return {k: (min(v), outs[k]) for k, v in times.items()}


def section(pct: float) -> str:
    """The RESULTS.md section of a window of ``pct`` % of the first log."""
    return (
        SECTION if pct == 1 else f"## extract, {pct:g}% window (bench/extract.py --window {pct:g})"
    )


def window_runs(spark, root: str, n_window: int, floors: bool = True) -> tuple[dict, dict]:
    """``(runs, facts)``: the timed functions of one lake (same rows checked, warmed up)
    and what to report besides the times (``floors``: with the two floor cases)."""
    from pyspark.sql import functions as F

    from seglake.lake.catalog import Catalog
    from seglake.record.schema import KAFKA_SOURCE_SCHEMA
    from seglake.sample import START_MS
    from seglake.spark.extract import extract
    from seglake.spark.extract_plan import ExtractOptions, plan_extract

    total = sum(Catalog(root).log_end_offsets(TOPIC).values())
    lo = START_MS + total // 2  # 1 message per ms: the middle window of n_window messages
    hi = lo + n_window

    def seglake():
        return extract(spark, root, TOPIC, start=lo, end=hi, mode="filter")

    def kafka():  # Kafka's semantics: offsetsForTimes(start) .. offsetsForTimes(end)
        return extract(spark, root, TOPIC, start=lo, end=hi, mode="offsets")

    def parquet():
        ts = F.col("timestamp")
        return spark.read.parquet(root + "-parquet").filter(
            (ts >= F.timestamp_millis(F.lit(lo))) & (ts < F.timestamp_millis(F.lit(hi)))
        )

    def noop(df) -> None:
        df.write.format("noop").mode("overwrite").save()

    def check(df) -> tuple:
        return tuple(df.agg(F.count("*"), F.sum(F.length("value")), F.sum("offset")).first())

    # the floor: the same rows already decoded, memory-mapped from an Arrow file (batches
    # of 64k rows) by one mapInArrow task per core, each emitting its share of the batches
    # (what any Python reader pays to hand rows to Spark)
    rows_file = root + f"-window-{n_window}.arrow"
    # ... and what a reader inside the JVM could reach: the same rows in one parquet file
    # (uncompressed, row groups of 500k rows), read whole by Spark's own reader
    jvm_file = root + f"-window-{n_window}.parquet"
    if floors:
        write_floor_files(seglake().toArrow().cast(KAFKA_SOURCE_SCHEMA), rows_file, jvm_file)

    def jvm_floor():
        return spark.read.parquet(jvm_file)

    def floor():
        return python_floor(spark, rows_file)

    plan = plan_extract(root, TOPIC, ExtractOptions(start=lo, end=hi, mode="filter"))
    same = [seglake, parquet] + ([floor, jvm_floor] if floors else [])
    assert len({check(fn()) for fn in same}) == 1, "seglake and parquet rows differ"
    for fn in [*same, kafka]:  # warm up: workers, JIT, cache (both timed paths: a noop
        fn().toArrow()  # write's Python workers were not the collect's in pyspark 4.2)
        noop(fn())
    runs = {
        "parquet": lambda: parquet().toArrow().num_rows,
        "seglake": lambda: seglake().toArrow().num_rows,
        "kafka": lambda: kafka().toArrow().num_rows,
        "floor": lambda: floor().toArrow().num_rows,
        "jvm_floor": lambda: jvm_floor().toArrow().num_rows,
        "parquet_noop": lambda: noop(parquet()),
        "seglake_noop": lambda: noop(seglake()),
        "kafka_noop": lambda: noop(kafka()),
        "floor_noop": lambda: noop(floor()),
        "jvm_floor_noop": lambda: noop(jvm_floor()),
    }
    if not floors:
        runs = {k: fn for k, fn in runs.items() if "floor" not in k}
    facts = {
        "total": total,
        "planned": plan.planned_bytes,
        "tail": plan.tail_bytes,
        "kafka_planned": plan_extract(root, TOPIC, ExtractOptions(start=lo, end=hi)).planned_bytes,
    }
    return runs, facts


def write_floor_files(rows, rows_file: str, jvm_file: str) -> None:
    """The floors' inputs: the Arrow table ``rows`` as an Arrow file of FLOOR_BATCH-row
    batches (:func:`python_floor`) and as one uncompressed parquet file (row groups of
    500k rows, for Spark's own reader)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pa.ipc.new_file(rows_file, rows.schema) as out:
        out.write_table(rows, max_chunksize=FLOOR_BATCH)
    pq.write_table(rows, jvm_file, compression="none", row_group_size=CHUNK // 2)


def python_floor(spark, rows_file: str):
    """What any Python reader pays to hand rows to Spark: the rows of ``rows_file``
    (decoded beforehand), memory-mapped by one ``mapInArrow`` task per core (at most one
    per batch), each emitting its share of the batches."""
    import pyarrow as pa

    from seglake.spark.session import spark_schema

    with pa.memory_map(rows_file) as m:
        head = pa.ipc.open_file(m)
        schema, n_batches = head.schema, head.num_record_batches
    tasks = max(1, min(spark.sparkContext.defaultParallelism, n_batches))

    def emit(batches):
        mine = [k for b in batches for k in b.column(0).to_pylist()]
        f = pa.ipc.open_file(pa.memory_map(rows_file))
        for k in mine:
            for i in range(k, f.num_record_batches, tasks):
                yield f.get_batch(i)

    return spark.range(tasks, numPartitions=tasks).mapInArrow(emit, spark_schema(schema))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--growth", type=int, default=16)
    ap.add_argument("--window", type=float, default=1.0, help="window, %% of the first log")
    ap.add_argument("--repeat", type=int, default=REPEAT, help="best of this many rounds")
    ap.add_argument("--no-floors", action="store_true", help="leave out the floor cases")
    ap.add_argument("--dir", default=None, help="build (or reuse) the lakes here, keep them")
    args = ap.parse_args(argv)
    tmp = args.dir or tempfile.mkdtemp(prefix="seglake-bench-extract-")
    spark = session()
    try:
        sizes = [args.messages] + ([args.messages * args.growth] if args.growth > 1 else [])
        n_window = int(args.messages * args.window / 100)
        built = sum(build(lake_path(tmp, n), n) for n in sizes)
        runs, facts = {}, {}
        for n in sizes:
            mine, facts[n] = window_runs(spark, lake_path(tmp, n), n_window, not args.no_floors)
            runs.update({(n, k): fn for k, fn in mine.items()})
        got = best(runs, repeat=args.repeat)  # every size in every round: alike conditions
        results = [
            (
                n,
                facts[n]
                | {k: t for (m, k), (t, _) in got.items() if m == n}
                | {"rows": got[(n, "seglake")][1], "kafka_rows": got[(n, "kafka")][1]},
            )
            for n in sizes
        ]
        text = report(results, n_window, built, args.growth, args.window, args.repeat)
        print(text)
        replace_section(text)  # text starts with section(args.window)
    finally:
        if not args.dir:
            shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    return 0


def lake_path(base: str, n: int) -> str:
    return os.path.join(base, f"lake-{n}")


def report(
    results: list[tuple[int, dict]],
    n_window: int,
    built: float,
    growth: int,
    pct: float = 1.0,
    repeat: int = REPEAT,
) -> str:
    def ratio(r: dict, k: str, peer: str) -> str:
        return f"{r[k]:.2f} s, **{r[k] / r[peer]:.2f}x**"

    lines = [
        section(pct),
        "",
        f"`local[2]`, {os.cpu_count()} CPUs shared with other engineers' Spark jobs "
        f"(ratios are within one run; best of {repeat}, each round running every "
        f"case of every size in turn); "
        f"{PARTITIONS} partitions, lz4, 8 MiB segments; window = {n_window:,} messages "
        f"({pct:g}% of the first log) in the middle of the log; lakes built without Spark "
        f"({f'{built:.0f} s' if built else 'reused'}). Ratio = seglake time / parquet "
        f"time (target <= {0.5 if pct == 1 else 0.6}x); "
        "`toArrow()` collects every column of every row in the driver, `noop` "
        "materialises them in the JVM.",
        "",
        '**Same rows** (`mode="filter"`: exactly start <= timestamp < end, like the '
        "parquet filter):",
        "",
        "| log messages | rows | log bytes planned (past the end time) | "
        "parquet toArrow | seglake toArrow | parquet noop | seglake noop |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, r in results:
        lines.append(
            f"| {n:,} | {r['rows']:,} | {r['planned']:,} ({r['tail']:,}) | "
            f"{r['parquet']:.2f} s | {ratio(r, 'seglake', 'parquet')} | "
            f"{r['parquet_noop']:.2f} s | "
            f"{ratio(r, 'seglake_noop', 'parquet_noop')} |"
        )
    lines += [
        "",
        'Kafka\'s semantics (`mode="offsets"`: offsetsForTimes(start) .. '
        "offsetsForTimes(end), what a consumer seeking by time gets; under "
        "non-monotonic CreateTime a few rows differ from the parquet filter's); "
        "ratios against the same parquet runs:",
        "",
        "| log messages | rows | log bytes planned | seglake toArrow | seglake noop |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, r in results:
        lines.append(
            f"| {n:,} | {r['kafka_rows']:,} | {r['kafka_planned']:,} | "
            f"{ratio(r, 'kafka', 'parquet')} | "
            f"{ratio(r, 'kafka_noop', 'parquet_noop')} |"
        )
    floors = "floor" in results[0][1]
    lines += (
        []
        if not floors
        else [
            "",
            "The floor of any reader in Python: the same rows as the first table, "
            "decoded beforehand and memory-mapped from an Arrow file by one "
            "`mapInArrow` task per core (no planning, no reading, no decoding); and the floor "
            "of a reader inside the JVM: the same rows in one uncompressed parquet "
            "file read whole by Spark; ratios against the same parquet runs:",
            "",
            "| log messages | floor toArrow | floor noop | JVM floor toArrow | JVM floor noop |",
            "|---:|---:|---:|---:|---:|",
        ]
    )
    for n, r in results if floors else []:
        lines.append(
            f"| {n:,} | {ratio(r, 'floor', 'parquet')} | "
            f"{ratio(r, 'floor_noop', 'parquet_noop')} | "
            f"{ratio(r, 'jvm_floor', 'parquet')} | "
            f"{ratio(r, 'jvm_floor_noop', 'parquet_noop')} |"
        )
    if len(results) > 1:
        (_, a), (_, b) = results[0], results[-1]
        flat = ", ".join(
            f"{name} {b[k] / a[k]:.2f}"
            for name, k in (
                ("seglake filter", "seglake"),
                ("seglake filter noop", "seglake_noop"),
                ("offsets mode", "kafka"),
                ("offsets mode noop", "kafka_noop"),
                ("parquet", "parquet"),
                ("parquet noop", "parquet_noop"),
            )
        )
        lines += ["", f"Flatness, time at x{growth} / time at x1 (target <= 1.2): {flat}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
