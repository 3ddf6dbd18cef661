"""Ingest: message data -> Kafka partition logs in a lake, published atomically.

    input DataFrame
      -> normalize (validate, internal columns)                       spark/normalize.py
      -> count pass over (topic, key[, partition][, offset]) only: records per (input
         task, topic, partition); partition = murmur2(key) % N when not given
         (none where the footers prove no shuffle: one pass, spark/ingest_rebase.py)
      -> plan (driver): offsets from the catalog's log end offsets, checks, write mode
                                                                       spark/ingest_plan.py
      -> no shuffle (default when pieces are large): each input task writes its records
         of each partition, offsets continuing the earlier tasks'    spark/ingest_tasks.py
         shuffle (given offsets, timestamp order, small pieces): prepare (partition,
         offset, chunk) -> repartition(one task per chunk) -> sortWithinPartitions ->
         encode
      -> SegmentWriter per (topic, partition, piece or chunk) writes .log/.index/
         .timeindex to <root>/_staging/<run>/<topic>-<p>/, one row per segment
      -> driver: verify counts and contiguity, ONE Delta commit (run-id guarded),
         then move staged files into <root>/<topic>-<p>/ and drop the staging dir.

Commit first, move second: a run that loses the commit race never touches a partition
directory, and a reader of a committed row whose file is not moved yet finds it under
``_staging/<run_id>/`` (``LogSegment(staged_path=...)``). Rerunning a committed run
id finishes any pending moves and changes nothing else.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyspark.sql.functions as F
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import OffsetOrderError, SeglakeError
from seglake.lake import runs
from seglake.lake.catalog import Catalog
from seglake.lake.handle import LakeHandle
from seglake.lake.runs import RunInput
from seglake.lake.staging import check_staged, cleanup, publish_pending
from seglake.lake.topic_store import topic_configs
from seglake.lake_paths import STAGING_DIR
from seglake.location import Root
from seglake.spark import direct_ingest as direct
from seglake.spark import ingest_rebase as rebase
from seglake.spark import ingest_tasks as tasks
from seglake.spark.arrow_input import Normalizer, Split
from seglake.spark.ingest_plan import (
    IngestPlan,
    PartitionPlan,
    plan_ingest,
    segment_counts,
    stat_files,
)
from seglake.spark.ingest_result import IngestResult, new_run_id
from seglake.spark.ingest_tasks import SEGMENT_ROWS
from seglake.spark.normalize import normalize
from seglake.spark.session import seglake_errors, spark_schema
from seglake.storage.naming import run_dir, validate_run_id, validate_topic

log = logging.getLogger("seglake.ingest")


@seglake_errors()  # a task's own error, not Spark's wrapper
def ingest(
    spark: SparkSession,
    df: DataFrame,
    root: Root | LakeHandle,
    *,
    run_id: str | None = None,
    conf: LogConfig | Mapping[str, Any] | None = None,
    topic: str | None = None,
    num_partitions: int | None = None,
    fail_after_records: int | None = None,
) -> IngestResult:
    """Write ``df`` (Spark Kafka source shape) into the lake at ``root``.

    Args:
        spark: the session.
        df: input; only ``value`` is required (see schemas/input.json).
        root: lake root URI (local path, file://, s3://...), or its handle (the job's).
        run_id: idempotency key; rerunning a committed run id is a no-op.
        conf: a :class:`LogConfig` or Kafka-named overrides (``{"log.segment.bytes": ...}``).
        topic: topic of every row when ``df`` has no topic column.
        num_partitions: partitions for Kafka's default partitioner when ``df`` has no
            partition column (default: the topic's partitions in the catalog, else
            ``num.partitions``).
        fail_after_records: testing hook: make each encode task fail after this many
            records (a crash mid-write).
    """
    lake = LakeHandle.open(root)  # parsed once (a handle: the job's)
    started = time.time()
    config = conf if isinstance(conf, LogConfig) else LogConfig.load(overrides=conf)
    run_id = new_run_id() if run_id is None else validate_run_id(run_id)
    catalog = lake.catalog
    config = topic_configs(catalog, config)  # each topic's: for_topic(t)
    files = stat_files(_input_paths(df))
    if catalog.run_committed(run_id):
        recount = functools.partial(_recount, df, topic, num_partitions, catalog, config)
        runs.check_reuse(catalog, run_id, runs.describe_input(files), counts=recount)
        publish_pending(lake, run_id)
        return _already_committed(run_id, started, catalog)
    fs, base = lake.fs, lake.base
    staging = run_dir(base, STAGING_DIR, run_id)
    lakefs.delete_dir(fs, staging, root=base)  # a failed earlier attempt of this run id
    if catalog.exists():  # other runs that failed or died: finish or remove them
        _sweep_other_runs(lake, config, run_id)
    try:
        rows, has_offset, n = _write(
            spark,
            df,
            lake,
            run_id,
            config,
            topic,
            num_partitions,
            catalog,
            started,
            fail_after_records,
        )
        if rows.num_rows == 0:
            lakefs.delete_dir(fs, staging, root=base)
            return IngestResult(
                run_id,
                False,
                False,
                rows,
                time.time() - started,
                catalog.version() if catalog.exists() else None,
            )
        check_staged(fs, staging, rows, run_id)
        covered = runs.describe_input(files, segment_counts(rows), num_partitions=n)
        result = catalog.commit(
            rows,
            run_id,
            contiguous=not has_offset,
            metadata={runs.INPUT_KEY: covered.to_json()},
        )
    except BaseException:
        lakefs.delete_dir(fs, staging, root=base)
        raise
    if result.already_committed:
        lakefs.delete_dir(fs, staging, root=base)
        runs.check_reuse(catalog, run_id, covered)  # committed meanwhile: the same input?
        return _already_committed(run_id, started, catalog)
    publish_pending(lake, run_id, rows)
    return IngestResult(run_id, True, False, rows, time.time() - started, result.version)


def _already_committed(run_id: str, started: float, catalog: Catalog) -> IngestResult:
    empty = SEGMENT_ROWS.empty_table()
    return IngestResult(run_id, False, True, empty, time.time() - started, catalog.version())


def _sweep_other_runs(lake: LakeHandle, config: LogConfig, run_id: str) -> None:
    """Staging of other runs, before this one: a committed run's pending moves finished,
    a run that never committed removed once older than ``staging.grace.ms``."""
    swept = cleanup(
        lake,
        older_than_s=config.staging_grace_ms / 1000,
        sweep_catalog=False,
        delete_delay_s=config.file_delete_delay_ms / 1000,
    )
    if swept.published_runs or swept.removed_runs:
        log.warning("before run %s: %s", run_id, swept)


def _write(
    spark: SparkSession,
    df: DataFrame,
    lake: LakeHandle,
    run_id: str,
    config: LogConfig,
    topic: str | None,
    num_partitions: int | None,
    catalog: Catalog,
    started: float,
    fail_after_records: int | None,
) -> tuple[pa.Table, bool, int | None]:
    if topic is not None:
        validate_topic(topic)
    norm = normalize(
        df,
        topic=topic,
        log_append_time_ms=int(started * 1000),
        append_time=config.append_time(topic),
    )
    leo = catalog.log_end_offsets() if catalog.exists() else {}
    has_offset = "offset" in norm.columns
    n = None if "partition" in norm.columns else partition_count(topic, num_partitions, leo, config)
    splits = None if has_offset else direct.splits(df)
    reader = direct.normalizer(df, topic, int(started * 1000), config) if splits else None
    if splits and reader is not None and rebase.one_pass(splits, reader, n, config, lake):
        rows = _one_pass(spark, splits, reader, lake, run_id, config, n, leo, fail_after_records)
        return rows, has_offset, n
    if splits and reader is not None:
        counts = direct.count(spark, splits, reader, n)
    else:
        counts = _count(norm, n, has_offset)
    plan = plan_ingest(counts, leo, config, has_offset=has_offset)
    if not plan.partitions:
        return SEGMENT_ROWS.empty_table(), has_offset, n
    if plan.shuffle:
        out = _shuffled(norm, plan, lake, run_id, config, n, has_offset, fail_after_records)
    else:
        writer = tasks.local_writer(lake, run_id, config, n, plan.task_starts, fail_after_records)
        out = (
            direct.write(spark, splits, reader, writer)
            if splits and reader is not None
            else norm.mapInArrow(writer, spark_schema(SEGMENT_ROWS))
        )
    return _checked(out.toArrow().cast(SEGMENT_ROWS), plan.partitions, has_offset), has_offset, n


def _one_pass(
    spark: SparkSession,
    splits: list[Split],
    reader: Normalizer,
    lake: LakeHandle,
    run_id: str,
    config: LogConfig,
    n: int | None,
    leo: dict[tuple[str, int], int],
    fail_after_records: int | None,
) -> pa.Table:
    """No count pass (the footers prove no shuffle): each input task writes its records
    from offset 0, then the rows are rebased onto the offsets the plan gives them."""
    writer = tasks.local_writer(lake, run_id, config, n, {}, fail_after_records, log_end=leo)
    rows = direct.write(spark, splits, reader, writer).toArrow().cast(SEGMENT_ROWS)
    plan = plan_ingest(rebase.counts(rows), leo, config, has_offset=False)
    if plan.shuffle:  # one_pass proved it is not
        raise SeglakeError("one-pass ingest planned a shuffle: counts below the footers'")
    rows = rebase.rebase(lake, run_id, rows, plan.task_starts, plan.log_end)
    return _checked(rows, plan.partitions, False)


def _shuffled(
    norm: DataFrame,
    plan: IngestPlan,
    lake: LakeHandle,
    run_id: str,
    config: LogConfig,
    n: int | None,
    has_offset: bool,
    fail_after_records: int | None,
) -> DataFrame:
    """The shuffle write: prepare (partition, offset, chunk) -> repartition (one task per
    chunk) -> sortWithinPartitions -> encode; its segment rows."""
    by_ts = config.ingest_order == "timestamp" and not has_offset
    prepared = norm.mapInArrow(
        tasks.prepare(
            plan.partitions,
            plan.task_starts,
            n,
            has_offset,
            by_ts,
            tasks.task_keys(plan.num_tasks),
        ),
        _with_fields(
            norm,
            ("partition", T.IntegerType()),
            ("offset", T.LongType()),
            ("_chunk", T.IntegerType()),
            ("_task", T.IntegerType()),
        ),
    )
    order = ["topic", "partition", "_chunk", *(["timestamp"] if by_ts else []), "offset"]
    return (
        prepared.repartition(plan.num_tasks, "_task")
        .sortWithinPartitions(*order)
        .mapInArrow(
            tasks.encoder(lake, run_id, config, plan.log_end, by_ts, fail_after_records),
            spark_schema(SEGMENT_ROWS),
        )
    )


def _checked(
    rows: pa.Table, plans: dict[tuple[str, int], PartitionPlan], has_offset: bool
) -> pa.Table:
    """The write's segment rows in (topic, partition, base offset) order, verified."""
    rows = rows.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")]
    )
    _verify(rows, plans, has_offset)
    return rows


def _input_paths(df: DataFrame) -> list[str]:
    try:
        return list(df.inputFiles())
    except Exception:  # a source without files
        return []


def _recount(
    df: DataFrame,
    topic: str | None,
    num_partitions: int | None,
    catalog: Catalog,
    config: LogConfig,
    stored: RunInput,
) -> dict[tuple[str, int], int]:
    """Records per (topic, partition) of ``df`` (a count pass), partitioned as the run
    that committed was (``stored.num_partitions``), to compare a reused run id's input."""
    norm = normalize(df, topic=topic, log_append_time_ms=0, append_time=config.append_time(topic))
    n = None
    if "partition" not in norm.columns:
        leo = catalog.log_end_offsets()
        n = stored.num_partitions or partition_count(topic, num_partitions, leo, config)
    counts: dict[tuple[str, int], int] = {}
    for r in _count(norm, n, "offset" in norm.columns):
        key = (r["topic"], int(r["partition"]))
        counts[key] = counts.get(key, 0) + int(r["count"])
    return counts


def _count(norm: DataFrame, num_partitions: int | None, has_offset: bool) -> list[dict[str, Any]]:
    """The count pass: one row per (input task, topic, partition) with its count and offset
    range. Reads only the columns it needs; Python only to partition by key."""
    cols = [
        "topic",
        "key",
        *(["partition"] if num_partitions is None else []),
        *(["offset"] if has_offset else []),
    ]
    pinned = [F.hash(*norm.columns).alias("_all")] if _pruning_changes_rows(norm) else []
    if num_partitions is None and not _local_rows(norm):
        lo, hi = (
            (F.min("offset"), F.max("offset"))
            if has_offset
            else (F.lit(None).cast("long"), F.lit(None).cast("long"))
        )
        rows = (
            norm.select(*cols, *pinned)
            .groupBy(F.spark_partition_id().alias("task"), "topic", "partition")
            .agg(
                F.count(F.lit(1)).alias("count"),
                lo.alias("lo"),
                hi.alias("hi"),
                *(F.max("_all") for _ in pinned),
            )
        )
        return [r.asDict() for r in rows.collect()]
    counted = norm.select(*cols, *pinned).mapInArrow(
        tasks.count_groups(num_partitions), spark_schema(tasks.COUNT_ROWS)
    )
    out: list[dict[str, Any]] = counted.toArrow().to_pylist()
    return out


def _local_rows(df: DataFrame) -> bool:
    """Rows held by the driver (``createDataFrame`` of pandas or a list): Spark folds a
    projection over them on the driver, where ``spark_partition_id()`` is 0 for every
    row, while the write pass runs them in several tasks; such input is counted by
    partition id in Python (``count_groups``), as the write pass sees it."""
    return "LocalRelation" in df._jdf.queryExecution().optimizedPlan().toString()


def _pruning_changes_rows(df: DataFrame) -> bool:
    """A round-robin repartition in the input (``df.repartition(n)``) sorts rows by their
    bytes first, so reading fewer columns would move rows to other tasks: the count pass
    must then keep every column (hashed) to see the rows where the write pass sees them."""
    return "RoundRobinPartitioning" in df._jdf.queryExecution().executedPlan().toString()


def _with_fields(df: DataFrame, *fields: tuple[str, T.DataType]) -> T.StructType:
    """``df``'s schema with ``fields`` replaced or appended at the end, in order."""
    names = {n for n, _ in fields}
    return T.StructType(
        [
            *(f for f in df.schema.fields if f.name not in names),
            *(T.StructField(n, t, False) for n, t in fields),
        ]
    )


def partition_count(
    topic: str | None,
    num_partitions: int | None,
    leo: Mapping[tuple[str, int], int],
    config: LogConfig,
) -> int:
    """Partitions for Kafka's default partitioner: the argument, else the topic's
    partitions in the catalog, else ``num.partitions``."""
    existing: dict[str, int] = {}
    for t, p in leo:
        existing[t] = max(existing.get(t, 0), p + 1)
    if num_partitions is None:
        counts = set(existing.values())
        num_partitions = (
            counts.pop()
            if len(counts) == 1 and topic in existing
            else (existing.get(topic or "", 0) or config.num_partitions)
        )
    n = int(num_partitions)
    if n < 1:
        raise SeglakeError(f"--num-partitions must be >= 1, got {n}")
    return n


def _verify(rows: pa.Table, plans: dict[tuple[str, int], PartitionPlan], has_offset: bool) -> None:
    """Before committing: every partition got exactly its records, in non-overlapping
    segments starting at or after its log end offset (assigned: exactly at it, gapless)."""
    seg = rows.to_pandas()
    for (t, p), plan in plans.items():
        g = seg[(seg.topic == t) & (seg.partition == p)]
        n = int(g.record_count.sum())
        if n != plan.count:
            raise SeglakeError(
                f"{t}-{p}: wrote {n} records but counted {plan.count} in the input: the input "
                "is not deterministic between the count pass and the write (persist it first)"
            )
        bases, nexts = g.base_offset.to_numpy(), g.next_offset.to_numpy()
        if len(g) and (bases[1:] < nexts[:-1]).any():
            raise OffsetOrderError(
                f"{t}-{p}: segments overlap: bases {bases.tolist()}, next offsets {nexts.tolist()}"
            )
        if (
            not has_offset
            and len(g)
            and (bases[0] != plan.log_end_offset or (bases[1:] != nexts[:-1]).any())
        ):
            raise SeglakeError(
                f"{t}-{p}: assigned offsets are not contiguous from the log end "
                f"offset {plan.log_end_offset}: bases {bases.tolist()}"
            )
