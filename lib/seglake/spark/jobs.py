"""The spark-submit jobs: parse arguments, build the session, call the library, print.

Errors of seglake's own (bad input, bad config, lost races, damaged batches) print one
line and exit 2, also when a task raised them (:func:`task_error`: not a Py4J traceback).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from seglake.cli import jobargs
from seglake.config import LogConfig, parse_overrides
from seglake.errors import SeglakeError
from seglake.fs import refused
from seglake.lake.handle import LakeHandle
from seglake.spark.session import (
    get_session,
    has_delta_spark,
    list_accumulator,
    spark_error,
    task_error,
)

if TYPE_CHECKING:
    import argparse

    import pyarrow.fs as pafs
    from deltalake.transaction import AddAction
    from pyspark import Accumulator


def _print_skipped(acc: Accumulator[list[str]] | None) -> None:
    """The damaged batches tasks skipped (``seglake.read.corrupt=skip``): count, each."""
    lines = sorted(set(acc.value)) if acc is not None else []
    if lines:
        print(f"skipped {len(lines)} damaged batch(es) (seglake.read.corrupt=skip):")
        for line in lines:
            print(f"  {line}")


def read_input(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    """A DataFrame of ``path`` in ``fmt`` (delta without delta-spark: via deltalake)."""
    jobargs.require_path(path, "input path")
    if fmt == "delta":
        if has_delta_spark(spark):
            return spark.read.format("delta").load(path)
        return _read_delta(spark, path)
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(path)


def _read_delta(spark: SparkSession, path: str) -> DataFrame:
    """A Delta table without delta-spark: its current parquet files (from the log, via
    deltalake) read by Spark in parallel. Tables whose files need rewriting on read
    (deletion vectors, column mapping) go through Arrow on the driver instead."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    features = set(table.protocol().reader_features or [])
    files = table.file_uris()
    if features & {"deletionVectors", "columnMapping"} or not files:
        return spark.createDataFrame(table.to_pyarrow_dataset().to_table())
    reader = spark.read
    if table.metadata().partition_columns:
        reader = reader.option("basePath", path)
    return reader.parquet(*files)


def _config(args: argparse.Namespace) -> LogConfig:
    """The job's settings: ``--conf-file`` (broker level), then ``--conf``; those given by
    a topic-level name (``segment.bytes``) win over the lake's topic configs."""
    return LogConfig.load(args.conf_file, parse_overrides(args.conf))


def run_ingest(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake.spark.ingest import ingest

    fmt = jobargs.format_from_path(args.input, args.input_format, jobargs.FORMATS)
    df = read_input(spark, args.input, fmt)
    result = ingest(
        spark,
        df,
        args.root,
        run_id=args.run_id,
        conf=_config(args),
        topic=args.topic,
        num_partitions=args.num_partitions,
    )
    print(result.summary())
    return 0


def write_output(spark: SparkSession, df: DataFrame, path: str, fmt: str) -> None:
    """Write ``df`` to ``path`` (delta via delta-spark if configured, else
    :func:`append_delta`)."""
    if fmt == "delta":
        if has_delta_spark(spark):
            df.write.format("delta").mode("append").save(path)
        else:
            append_delta(spark, df, path)
        return
    df.write.mode("errorifexists").format(fmt).save(path)


def append_delta(spark: SparkSession, df: DataFrame, path: str) -> int:
    """Append ``df`` to the Delta table at ``path`` (created if missing) without
    delta-spark: the executors write parquet files into ``path/part-<id>/`` (nothing goes
    through the driver), then one deltalake commit adds them. A failed write commits
    nothing (its files are unreferenced, and removed). Returns the rows added.
    """
    import json
    import uuid

    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import create_table_with_add_actions
    from pyspark.sql.pandas.types import to_arrow_schema

    from seglake import fs as lakefs

    fs, base = lakefs.resolve(path)
    sub = f"part-{uuid.uuid4().hex[:12]}"
    conf = "spark.sql.parquet.outputTimestampType"  # Delta reads microseconds, not INT96
    saved = spark.conf.get(conf, None)
    spark.conf.set(conf, "TIMESTAMP_MICROS")
    try:
        df.write.mode("errorifexists").parquet(lakefs.join(path, sub))
        actions = _add_actions(fs, base, sub)
        schema = DeltaSchema.from_arrow(to_arrow_schema(df.schema, timezone="UTC"))
        if DeltaTable.is_deltatable(path):
            DeltaTable(path).create_write_transaction(
                actions,  # type: ignore[arg-type]  # list invariance: adds only
                mode="append",
                schema=schema,
            )
        else:
            create_table_with_add_actions(path, schema, actions, mode="append")
    except BaseException:
        with contextlib.suppress(OSError):
            lakefs.delete_dir(fs, lakefs.join(base, sub), root=base)
        raise
    finally:
        if saved is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, saved)
    return sum(json.loads(a.stats)["numRecords"] for a in actions)


def _add_actions(fs: pafs.FileSystem, base: str, sub: str) -> list[AddAction]:
    """Delta's add action of each parquet file the executors wrote into ``base/sub``
    (path relative to the table, size, modification time, ``numRecords`` from its
    footer); the other files there (``_SUCCESS``, ``.crc``: not data) are deleted."""
    import json

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    from seglake import fs as lakefs

    files = [i for i in fs.get_file_info(pafs.FileSelector(lakefs.join(base, sub))) if i.is_file]
    actions = []
    for i in files:
        if i.base_name.endswith(".parquet"):
            rows = pq.read_metadata(i.path, filesystem=fs).num_rows
            actions.append(
                AddAction(
                    f"{sub}/{i.base_name}",
                    i.size,
                    {},
                    i.mtime_ns // 1_000_000,
                    True,
                    json.dumps({"numRecords": rows}),
                )
            )
        else:  # _SUCCESS, .crc: not data
            lakefs.delete_file(fs, i.path, root=base)
    return actions


def _accumulator(spark: SparkSession) -> Accumulator[int] | None:
    try:
        return spark.sparkContext.accumulator(0)
    except Exception:  # e.g. Spark Connect: no accumulators
        return None


def run_extract(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake import fs as lakefs
    from seglake.spark.extract import extract_with
    from seglake.spark.extract_plan import ExtractOptions, plan_extract

    config = _config(args)
    started = time.time()
    options = ExtractOptions(
        partitions=args.partitions,
        start=args.start,
        end=args.end,
        start_offset=args.start_offset,
        end_offset=args.end_offset,
        mode=args.mode,
        isolation_level=args.isolation_level,
        on_corrupt=config.read_corrupt,
    )
    plan = plan_extract(args.root, args.topic, options)
    print(plan.summary())
    acc, skipped = _accumulator(spark), list_accumulator(spark)
    before = lakefs.IO_STATS.snapshot()["bytes_read"]
    df = extract_with(
        spark,
        args.root,
        args.topic,
        options,
        plan=plan,
        cache_bytes=config.index_cache_bytes,
        bytes_accumulator=acc,
        skipped_accumulator=skipped,
    )
    write_output(spark, df, args.output, args.output_format)
    # in local mode executors may share this process's counter: count it once
    task_bytes = acc.value if acc is not None else lakefs.IO_STATS.snapshot()["bytes_read"] - before
    print(f"extracted offset ranges:\n{ranges_table(plan.ranges)}")
    print(
        f"read: {task_bytes} log bytes by {len(plan.tasks)} task split(s) over "
        f"{plan.segments} segment(s), {plan.driver_bytes} index/log bytes by the driver; "
        f"{time.time() - started:.1f} s; wrote {args.output_format} to {args.output}"
    )
    _print_skipped(skipped)
    return 0


def ranges_table(ranges: dict[tuple[str, int], tuple[int, int]]) -> str:
    """An extraction's ``[start, end)`` offsets per partition as an aligned table."""
    from seglake.render import text_table

    rows = [[t, p, lo, hi, hi - lo] for (t, p), (lo, hi) in sorted(ranges.items())]
    return text_table(["topic", "partition", "start offset", "end offset", "offsets"], rows)


def status_table(counts: dict[str, int]) -> str:
    """A lookup's answers per ``status`` as an aligned table (most common first)."""
    from seglake.render import text_table

    rows = [[s, n] for s, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return text_table(["status", "queries"], rows)


def run_lookup(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake.spark.lookup import lookup

    config = _config(args)
    started = time.time()
    fmt = jobargs.format_from_path(args.queries, args.queries_format, ("parquet", "json", "csv"))
    queries = read_input(spark, args.queries, fmt)
    # both Accumulator[int], or a None (no accumulators): `None in accs`, which mypy cannot narrow
    accs: tuple[Any, Any] = (_accumulator(spark), _accumulator(spark))
    skipped = list_accumulator(spark)
    out = lookup(
        spark,
        args.root,
        queries,
        cache_bytes=config.index_cache_bytes,
        io_accumulators=None if None in accs else accs,
        on_corrupt=config.read_corrupt,
        skipped_accumulator=skipped,
        latest_per_key=args.latest_per_key,
        isolation_level=args.isolation_level,
    ).cache()
    counts = {r["status"]: r["count"] for r in out.groupBy("status").count().collect()}
    write_output(spark, out, args.output, args.output_format)
    read = (
        f"read: {accs[0].value} index/log bytes from {accs[1].value} segment file(s) "
        "opened by the tasks; "
        if None not in accs
        else ""
    )
    print(f"lookup: {sum(counts.values()):,} answer rows\n{status_table(counts)}")
    print(f"{read}{time.time() - started:.1f} s; wrote {args.output_format} to {args.output}")
    _print_skipped(skipped)
    return 0


def run_recover(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake.lake.recovery import recover_lake
    from seglake.spark.session import task_mapper

    options = jobargs.recover_options(args, _config(args))
    # main's handle (itself), or a root given directly
    print(recover_lake(LakeHandle.open(args.root), options, map_tasks=task_mapper(spark)))
    return 0


def run_retention(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake.lake.retention import apply_retention

    rules, options = jobargs.retention_from_args(args)
    print(apply_retention(LakeHandle.open(args.root), rules, options))  # main's handle
    return 0


def run_compact(spark: SparkSession, args: argparse.Namespace) -> int:
    from seglake.lake.compaction import CompactOptions
    from seglake.spark.compact_job import compact_with

    options = CompactOptions(
        topics=args.topics,
        partitions=args.partitions,
        merge_only=args.merge_only,
        dry_run=args.dry_run,
        conf=parse_overrides(args.conf),
        base=_config(args),
        run_id=args.run_id,
        now_ms=args.now_ms,
    )
    result = compact_with(spark, args.root, options)
    print(result.summary())
    return 0


RUNNERS: dict[
    str,
    tuple[
        Callable[[], argparse.ArgumentParser],
        Callable[[SparkSession, argparse.Namespace], int],
    ],
] = {
    "ingest": (jobargs.ingest_parser, run_ingest),
    "extract": (jobargs.extract_parser, run_extract),
    "lookup": (jobargs.lookup_parser, run_lookup),
    "recover": (jobargs.recover_parser, run_recover),
    "retention": (jobargs.retention_parser, run_retention),
    "compact": (jobargs.compact_parser, run_compact),
}


def main(job: str, argv: list[str]) -> int:
    if job not in RUNNERS:
        print(f"seglake {job}: this job is not available in this build", file=sys.stderr)
        return 2
    parser_fn, runner = RUNNERS[job]
    args = parser_fn().parse_args(argv)
    started = time.time()
    root = getattr(args, "root", None)
    try:
        if root is not None:  # the lake opened once: executors get it pickled
            args.root = LakeHandle.open(root)
        jobargs.check_before_spark(job, args)  # so do paths and topics
        _config(args)  # bad settings fail before Spark starts
        spark = get_session(f"seglake-{job}")
        code = runner(spark, args)
    except Exception as exc:  # a SeglakeError, also one raised in a task: one line
        driver_io = isinstance(exc, OSError)  # the driver's own write the file system refused
        err = (
            task_error(exc)
            or (refused(exc, root) if driver_io else None)
            or (LakeHandle.open(root).location.unreachable(exc) if driver_io and root else None)
            or spark_error(exc)
        )
        if err is None:
            raise
        from_spark = not isinstance(exc, (SeglakeError, OSError))  # its traceback: the log
        log = os.environ.get("SEGLAKE_LOG_FILE") if from_spark else None
        jobargs.report_error(job, err, log_file=log)
        return 2
    print(f"seglake {job}: done in {time.time() - started:.1f} s", file=sys.stderr)
    return code
