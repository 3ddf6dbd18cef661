"""Job 3, extract: the records of a time (or offset) range, in the Spark Kafka source schema.

    driver:    catalog (one pinned version) -> per partition [start, end) offsets
               offsets mode: offsetsForTimes(start) .. offsetsForTimes(end) (no record
                   >= end: the log end offset), intersected with start/end offsets
               filter mode: segments pruned by catalog min/max timestamp; every record
                   of them with start <= timestamp < end; a segment holding records older
                   than start is entered at its time index's strict floor of start (no
                   record before it can be >= start); CreateTime is not monotonic and
                   Kafka keeps no minimum timestamp, so a segment is read up to the first
                   of its catalog tail minima >= end (seglake.storage.tail_minima), or to
                   its end when they are unknown; past the end time only the records'
                   timestamps are read (min_timestamps) and only batches holding late
                   records are decoded
               -> splits: one per segment, large segments cut at offset-index positions
                  (``split_bytes`` apart), so one partition is read by many tasks
               -> tasks: splits packed into few Spark tasks (as Spark packs small files:
                  about total / parallelism bytes each, at least 4 MiB, at most
                  4 x ``split_bytes``: 128 MiB), no shuffle, no DataFrame of splits to ship
    executors: ``spark.range(tasks).mapInArrow``: each task reads its splits, one ranged
               read per split (plus the header and batch after it for the split that ends
               a range), and decodes the batches that overlap, the splits of about 8 MiB
               of log in one call (``iter_splits``), handing each group's rows to Spark
               before decoding the next;
               then filters offsets (and timestamps), drops control batches and, under
               read_committed, records of aborted transactions (``.txnindex``)

Planning is a :class:`~seglake.lake.scan.Scan` (extract's arguments:
:mod:`seglake.spark.extract_plan`) packed by :func:`seglake.lake.packing.pack`;
:func:`read_split` / :func:`read_splits` (:mod:`seglake.lake.scan_read`) are the
pure functions the executors run (no Spark).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from seglake import fs as lakefs
from seglake.lake.handle import LakeHandle
from seglake.lake.packing import DEFAULT_SPLIT_BYTES, pack
from seglake.lake.scan import ScanPlan
from seglake.lake.scan_read import SplitReads, iter_splits
from seglake.location import Root
from seglake.record.schema import KAFKA_SOURCE_SCHEMA
from seglake.spark.extract_plan import BROADCAST_SPLITS, ExtractOptions, plan_extract
from seglake.spark.session import spark_schema
from seglake.storage.index_cache import get_cache

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["extract", "extract_with"]


def extract(
    spark: SparkSession,
    root: Root | LakeHandle,
    topic: str,
    *,
    partitions: Iterable[int] | str | None = None,
    start: int | str | None = None,
    end: int | str | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    mode: str = "offsets",
    isolation_level: str = "read_uncommitted",
    split_bytes: int = DEFAULT_SPLIT_BYTES,
    cache_bytes: int | None = None,
    plan: ScanPlan | None = None,
    bytes_accumulator: Accumulator[int] | None = None,
    on_corrupt: str = "raise",
    skipped_accumulator: Accumulator[list[str]] | None = None,
) -> DataFrame:
    """Records of ``topic`` in a time/offset range, exactly :data:`KAFKA_SOURCE_SCHEMA`.

    What is read (``partitions`` .. ``split_bytes``, ``on_corrupt``):
    :class:`~seglake.spark.extract_plan.ExtractOptions`, built here once (the job builds
    its own from its flags); the rest: :func:`extract_with`.
    """
    options = ExtractOptions(
        partitions,
        start,
        end,
        start_offset,
        end_offset,
        mode,
        isolation_level,
        split_bytes,
        on_corrupt,
    )
    return extract_with(
        spark,
        root,
        topic,
        options,
        plan=plan,
        cache_bytes=cache_bytes,
        bytes_accumulator=bytes_accumulator,
        skipped_accumulator=skipped_accumulator,
    )


def extract_with(
    spark: SparkSession,
    root: Root | LakeHandle,
    topic: str,
    options: ExtractOptions,
    *,
    plan: ScanPlan | None = None,
    cache_bytes: int | None = None,
    bytes_accumulator: Accumulator[int] | None = None,
    skipped_accumulator: Accumulator[list[str]] | None = None,
) -> DataFrame:
    """:func:`extract` of one options object.

    Args:
        plan: a plan from :func:`plan_extract` of the same options (else made here).
        cache_bytes: ``seglake.index.cache.bytes`` of the executors' cache.
        bytes_accumulator: a Spark accumulator that receives the log bytes tasks read.
        skipped_accumulator: a list accumulator (:func:`~seglake.spark.session.
            list_accumulator`) that receives one line per batch skipped
            (``on_corrupt="skip"``).
    """
    from seglake.config import LogConfig

    lake = LakeHandle.open(root)  # parsed once (a handle: the job's)
    plan = plan or plan_extract(lake, topic, options)
    cache_bytes = LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes
    acc, level, on_corrupt = bytes_accumulator, options.isolation_level, options.on_corrupt
    tasks = pack(plan.tasks, spark.sparkContext.defaultParallelism, split_bytes=options.split_bytes)
    # the task list travels with the function, or as a broadcast when it is large
    big = len(plan.tasks) > BROADCAST_SPLITS
    payload = spark.sparkContext.broadcast(tasks) if big else tasks
    version = plan.catalog_version  # a file gone since: VersionSupersededError in the task

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cache = get_cache(cache_bytes)
        mine = payload if isinstance(payload, list) else payload.value
        for b in batches:
            for task in b.column(0).to_pylist():
                skipped: list[str] = []
                with lakefs.IO_STATS.counting(acc):
                    how = SplitReads(level, on_corrupt, skipped, version)
                    for t in iter_splits(cache, lake.location, mine[task], how):
                        yield from t.to_batches()
                if skipped and skipped_accumulator is not None:
                    skipped_accumulator.add(skipped)

    return spark.range(len(tasks), numPartitions=max(1, len(tasks))).mapInArrow(
        read, spark_schema(KAFKA_SOURCE_SCHEMA)
    )
