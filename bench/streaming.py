"""Structured Streaming through seglake: the sink against the batch ingest and Spark's
parquet sink, the source against a parquet file-source stream.

    .venv/bin/python bench/streaming.py [--records N] [--batches B] [--rounds R]

Workload: N messages (default 2,000,000; ``seglake.sample.generate(N, value_bytes=100)``,
three topics, keys, two headers) written with pyarrow as B parquet files (default 20).
In ONE SparkSession (``local[2]``), every round runs each case once, in turn:

- ``ingest``: the batch ``ingest(spark, spark.read.parquet(dir), root, num_partitions=8)``;
- ``seglake sink``: ``readStream.parquet(dir)`` with ``maxFilesPerTrigger=1`` (B micro-
  batches) ``.writeStream.format("seglake")`` (``num.partitions=8``), Trigger.AvailableNow;
- ``seglake sink, append off``: the same with ``seglake.stream.append=false``;
- ``parquet sink``: the same stream ``.writeStream.format("parquet")``;
- ``seglake source``: ``readStream.format("seglake")`` (earliest, Trigger.AvailableNow)
  over the ingested lake into the ``noop`` sink;
- ``parquet source``: a parquet file-source stream of the same rows (the lake's records
  in the Kafka source's columns, B files) into ``noop``.

Both sides are warmed up with a small run first. Ratios are within a round; the table
gives the best round and the range over rounds. Results replace the "## streaming" section
of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract import replace_section

SECTION = "## streaming (bench/streaming.py)"
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def write_input(n: int, files: int, folder: Path) -> pa.Schema:
    from seglake.sample import generate

    table = generate(n, value_bytes=100)
    table = table.set_column(
        table.schema.get_field_index("headers"), "headers", table["headers"].cast(HEADERS)
    )
    folder.mkdir(parents=True)
    step = -(-n // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), folder / f"part-{i:03d}.parquet")
    return table.schema


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def run_stream(df, fmt: str, out: str, checkpoint: str, **options) -> None:
    w = df.writeStream.format(fmt).option("checkpointLocation", checkpoint)
    for k, v in options.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start(out) if out else w.trigger(availableNow=True).start()
    q.awaitTermination()


def round_(spark, inp: Path, rows: Path, lake: str, work: Path, tag: str) -> dict[str, float]:
    """Every case once; returns seconds per case and the stream lake's root."""
    from seglake.spark.ingest import ingest

    schema = spark.read.parquet(str(inp)).schema
    for d in work.glob(f"run-{tag}-*"):
        shutil.rmtree(d)

    def stream():
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(inp))

    out: dict[str, float] = {}
    out["ingest"] = timed(
        lambda: ingest(
            spark, spark.read.parquet(str(inp)), str(work / f"run-{tag}-ingest"), num_partitions=8
        )
    )

    def seglake_sink(name: str, append: str) -> None:
        options = {"num.partitions": "8", "seglake.stream.append": append}
        out_dir, cp = str(work / f"run-{tag}-{name}"), str(work / f"run-{tag}-cp-{name}")
        run_stream(stream(), "seglake", out_dir, cp, **options)

    out["seglake sink"] = timed(lambda: seglake_sink("lake", "true"))
    out["seglake sink, append off"] = timed(lambda: seglake_sink("lake2", "false"))
    out["parquet sink"] = timed(
        lambda: run_stream(
            stream(), "parquet", str(work / f"run-{tag}-pq"), str(work / f"run-{tag}-cp2")
        )
    )
    src = spark.readStream.format("seglake").option("startingOffsets", "earliest").load(lake)
    out["seglake source"] = timed(lambda: run_stream(src, "noop", "", str(work / f"run-{tag}-cp3")))
    rows_schema = spark.read.parquet(str(rows)).schema
    pqs = spark.readStream.schema(rows_schema).parquet(str(rows))
    out["parquet source"] = timed(lambda: run_stream(pqs, "noop", "", str(work / f"run-{tag}-cp4")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)

    import seglake.spark
    from seglake.lake.catalog import Catalog
    from seglake.spark.ingest import ingest
    from seglake.spark.session import get_session

    work = Path(tempfile.mkdtemp(prefix="seglake-stream-bench-"))
    try:
        write_input(args.records, args.batches, work / "input")
        write_input(20_000, 2, work / "warm-input")
        spark = get_session("bench-streaming", master="local[2]", quiet=True)
        seglake.spark.register(spark)
        lake = str(work / "lake")  # the source's lake and its rows as parquet
        ingest(spark, spark.read.parquet(str(work / "input")), lake, num_partitions=8)
        spark.read.format("seglake").option("includeHeaders", "true").load(lake).repartition(
            args.batches
        ).write.parquet(str(work / "rows"))
        warm_lake = str(work / "warm-lake")
        ingest(spark, spark.read.parquet(str(work / "warm-input")), warm_lake, num_partitions=8)
        spark.read.format("seglake").load(warm_lake).write.parquet(str(work / "warm-rows"))
        round_(spark, work / "warm-input", work / "warm-rows", warm_lake, work, "warm")
        rounds = [
            round_(spark, work / "input", work / "rows", lake, work, f"r{i}")
            for i in range(args.rounds)
        ]
        segs = Catalog(str(work / "run-r0-lake")).segments().to_pandas()
        per = segs.groupby(["topic", "partition"]).size()
        off = Catalog(str(work / "run-r0-lake2")).segments().to_pandas()
        per_off = off.groupby(["topic", "partition"]).size()
        batch_segs = Catalog(str(work / "run-r0-ingest")).segments().to_pandas()
        per_batch = batch_segs.groupby(["topic", "partition"]).size()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {
        "seglake sink / ingest": ("seglake sink", "ingest", 1.3),
        "seglake sink / parquet sink": ("seglake sink", "parquet sink", 1.5),
        "seglake sink, append off / ingest": ("seglake sink, append off", "ingest", 1.3),
        "seglake source / parquet source": ("seglake source", "parquet source", 1.0),
    }
    lines = [
        SECTION,
        "",
        f"{args.records:,} messages (100-byte values, 3 topics, 8 partitions each), "
        f"{args.batches} micro-batches (`maxFilesPerTrigger=1` over {args.batches} parquet "
        f"files), `local[2]`, 2 shared CPUs, {args.rounds} rounds in one session after a "
        "warm-up; Trigger.AvailableNow; seconds of the best round, ratios per round.",
        "",
        "| case | best s | all rounds s |",
        "|---|---:|---|",
    ]
    for case in rounds[0]:
        ts = [r[case] for r in rounds]
        lines.append(f"| {case} | {min(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} |")
    lines += ["", "| ratio | target | rounds |", "|---|---:|---|"]
    for name, (a, b, target) in ratios.items():
        rs = [r[a] / r[b] for r in rounds]
        lines.append(f"| {name} | <= {target}x | {', '.join(f'**{x:.2f}x**' for x in rs)} |")
    lines += [
        "",
        f"Segments per partition after the {args.batches} batches (default "
        f"`log.segment.bytes`, 1 GiB): min {per.min()}, max {per.max()} over {len(per)} "
        f"partitions (append off: {per_off.min()}-{per_off.max()}; the batch ingest of the "
        f"same data: {per_batch.min()}-{per_batch.max()}).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        replace_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
