"""Structured Streaming through seglake: the sink against the batch ingest and Spark's
parquet sink, the source against a parquet file-source stream.

    .venv/bin/python bench/streaming.py [--records N] [--batches B] [--rounds R]
        [--cases sink,source] [--source-batches S] [--no-write]

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
  in the Kafka source's columns, B files) into ``noop``;
- ``python floor``: the same rows decoded beforehand into Arrow files, handed to Spark by a
  Python streaming source that does nothing else (bench/stream_floor.py): the floor of any
  source written in Python, as many tasks as the seglake source runs.

``--cases`` chooses the sink cases, the source cases or both (a subset is printed, not
written to RESULTS.md); the source cases also give the CPU seconds of the JVM and its
Python workers (steadier than wall time on a shared machine). ``--source-batches S`` reads
the source cases in S micro-batches (seglake ``maxOffsetsPerTrigger`` = N / S, parquet
``maxFilesPerTrigger`` = B / S) instead of one (the python floor stays one batch).

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
from ingest import MemSampler, find_jvm
from results import replace_section

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


def round_(
    spark, inp: Path, rows: Path, lake: str, work: Path, tag: str, args: argparse.Namespace
) -> dict[str, float]:
    """Every chosen case once; returns seconds per case (and ``<case> CPU`` for the
    source cases)."""
    out: dict[str, float] = {}
    for d in work.glob(f"run-{tag}-*"):
        shutil.rmtree(d)
    if "sink" in args.cases:
        out.update(sink_round(spark, inp, work, tag))
    if "source" in args.cases:
        out.update(source_round(spark, rows, lake, work, tag, args))
    return out


def sink_round(spark, inp: Path, work: Path, tag: str) -> dict[str, float]:
    from seglake.spark.ingest import ingest

    schema = spark.read.parquet(str(inp)).schema

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
    return out


def source_round(
    spark, rows: Path, lake: str, work: Path, tag: str, args: argparse.Namespace
) -> dict[str, float]:
    """The source cases into ``noop``: seconds and CPU seconds (JVM + Python workers)."""
    from seglake.lake.catalog import Catalog

    n = sum(Catalog(lake).log_end_offsets().values())
    src = spark.readStream.format("seglake").option("startingOffsets", "earliest")
    pqs = spark.readStream.schema(spark.read.parquet(str(rows)).schema)
    if args.source_batches > 1:
        src = src.option("maxOffsetsPerTrigger", -(-n // args.source_batches))
        files = len(list(rows.glob("*.parquet")))
        pqs = pqs.option("maxFilesPerTrigger", -(-files // args.source_batches))
    cases = {
        "seglake source": src.load(lake),
        "parquet source": pqs.parquet(str(rows)),
        "python floor": spark.readStream.format("pyfloor").load(str(rows) + "-floor"),
    }
    out: dict[str, float] = {}
    for i, (name, df) in enumerate(cases.items()):
        with MemSampler(find_jvm()) as m:
            out[name] = timed(
                lambda df=df, i=i: run_stream(df, "noop", "", str(work / f"run-{tag}-cps{i}"))
            )
        out[f"{name} CPU"] = m.cpu_s
    return out


def floor_files(spark, lake: str, rows: Path) -> int:
    """The python floor's Arrow files beside ``rows``: one per task of the seglake source
    (planned as its first micro-batch is); returns that number of tasks."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    import stream_floor  # bench/stream_floor.py, here: --help imports no pyspark
    from seglake.spark.stream_source import SeglakeStreamReader

    r = SeglakeStreamReader(
        {"path": lake, "startingOffsets": "earliest"}, None, spark.sparkContext.defaultParallelism
    )
    start = r.initialOffset()
    tasks = len(r.partitions(start, r.latestOffset(start, ReadAllAvailable())))
    schema = r.opts.arrow_schema
    stream_floor.write_floor(rows, Path(str(rows) + "-floor"), schema, tasks)
    stream_floor.register(spark, schema)
    return tasks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument(
        "--cases",
        type=lambda v: set(v.split(",")),
        default={"sink", "source"},
        help="sink, source or sink,source (default); a subset is not written to RESULTS.md",
    )
    ap.add_argument(
        "--source-batches", type=int, default=1, help="micro-batches of the source cases"
    )
    args = ap.parse_args(argv)
    if not args.cases or args.cases - {"sink", "source"}:
        ap.error(f"--cases: {','.join(sorted(args.cases))} is not sink, source or sink,source")

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
        tasks = floor_files(spark, lake, work / "rows") if "source" in args.cases else 0
        floor_files(spark, warm_lake, work / "warm-rows")
        round_(spark, work / "warm-input", work / "warm-rows", warm_lake, work, "warm", args)
        rounds = [
            round_(spark, work / "input", work / "rows", lake, work, f"r{i}", args)
            for i in range(args.rounds)
        ]
        if "sink" in args.cases:
            per, per_off, per_batch = (
                Catalog(str(work / f"run-r0-{name}"))
                .segments()
                .to_pandas()
                .groupby(["topic", "partition"])
                .size()
                for name in ("lake", "lake2", "ingest")
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {
        "seglake sink / ingest": ("seglake sink", "ingest", 1.3),
        "seglake sink / parquet sink": ("seglake sink", "parquet sink", 1.5),
        "seglake sink, append off / ingest": ("seglake sink, append off", "ingest", 1.3),
        "seglake source / parquet source": ("seglake source", "parquet source", 1.0),
        "seglake source / parquet source, CPU": ("seglake source CPU", "parquet source CPU", 1.0),
        "python floor / parquet source": ("python floor", "parquet source", None),
        "python floor / parquet source, CPU": ("python floor CPU", "parquet source CPU", None),
    }
    ratios = {k: v for k, v in ratios.items() if v[0] in rounds[0] and v[1] in rounds[0]}
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
        label = case[: -len(" CPU")] + ", CPU s" if case.endswith(" CPU") else case
        lines.append(f"| {label} | {min(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} |")
    lines += ["", "| ratio | target | rounds |", "|---|---:|---|"]
    for name, (a, b, target) in ratios.items():
        rs = [r[a] / r[b] for r in rounds]
        goal = f"<= {target}x" if target else "(floor)"
        lines.append(f"| {name} | {goal} | {', '.join(f'**{x:.2f}x**' for x in rs)} |")
    if "sink" in args.cases:
        lines += [
            "",
            f"Segments per partition after the {args.batches} batches (default "
            f"`log.segment.bytes`, 1 GiB): min {per.min()}, max {per.max()} over {len(per)} "
            f"partitions (append off: {per_off.min()}-{per_off.max()}; the batch ingest of "
            f"the same data: {per_batch.min()}-{per_batch.max()}).",
        ]
    if "source" in args.cases:
        lines += [
            "",
            f"Source cases: {args.source_batches} micro-batch(es) each; the seglake source "
            f"runs {tasks} tasks (the python floor as many); CPU = seconds of the JVM and its "
            "Python workers (runner, planner, tasks) during the query.",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write and args.cases == {"sink", "source"}:
        replace_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
