"""Job 2, lookup: answer millions of ``(topic, partition, offset | timestamp)`` queries.

    driver:    read the catalog once (pinned version: a
               :class:`~seglake.lake.snapshot.Snapshot`) -> per (topic, partition) sorted
               numpy arrays (base_offset, next_offset, max_timestamp, path, size, run_id:
               :func:`~seglake.lake.lookup_plan.partition_arrays`), broadcast (once per
               catalog version: the driver keeps the last few)
    executors: mapInArrow over the queries as they are partitioned (no shuffle; a
               query set the plan's statistics show small, e.g. 10,000 queries, is
               coalesced into one task per ``TASK_QUERIES`` (a frame of key queries into
               at least ``defaultParallelism`` tasks): one stage, no exchange,
               also for an aggregation over the answers (two tasks on two cores did not
               pay at 10,000 queries: bench/RESULTS.md); with ``num_tasks``, first a
               pass that keys each query by its segment and a repartition that puts a
               segment's queries together): per task, up to ``chunk_rows`` queries at
               a time,
               - numpy.searchsorted maps each query to its segment (offset: floor on
                 base_offset; timestamp: first segment whose running-max max_timestamp
                 >= target), queries grouped by segment;
               - each segment is opened through the per-worker index cache (bounded by
                 ``seglake.index.cache.bytes``); all its targets are searched in its
                 offset/time index at once; targets whose index intervals touch (or lie
                 within ``READ_GAP``) share one ranged read of those intervals (plus the
                 batch after them only when it holds an answer), read straight into one
                 buffer, each segment's file opened once per round of reads;
                 batch headers are followed from each target's index floor for all
                 targets together (numpy); where the index and the log disagree, the
                 careful path (``LogSegment._span``, which rebuilds the index);
               - the batches holding answers, of all segments, are walked together to
                 find the answer records (timestamps and offsets only), and just those
                 records are decoded, in one call.

Every query gets exactly one output row: the Kafka source columns of the record found
(for an offset, the record there, or where there is none (removed by the cleaner, a
transaction marker) the next one, as a fetch from that offset returns it: ``offset`` >
``query_offset`` then; for a timestamp, the record a fetch from ``offsetsForTimes``
returns: the first record with timestamp >= it or, where Kafka's answer is a transaction
marker (its time search counts markers), the record after the marker), plus
``query_offset``, ``query_timestamp`` and ``status``:

    ok                       record returned
    offset_out_of_range      offset < log start offset or >= log end offset
    no_record_at_offset      inside the log, but no data record from there to its end
    corrupt_batch            the offset lies in a damaged batch that was skipped
                             (``on_corrupt="skip"``; by default a damaged batch raises
                             CorruptRecordError and the job fails with one line, exit 2)
    no_record_for_timestamp  no record with timestamp >= target (or only markers from
                             offsetsForTimes' answer on)
    log_end_offset           timestamp -1 (latest): ``offset`` is the log end offset
    no_record_for_key        a key query (:mod:`seglake.lake.lookup_keys`: one row per
                             record of the key, status ok) that matched no record
    unknown_partition        no committed segment for (topic, partition)
    invalid_query            neither/both of offset and timestamp, a timestamp < -3, or a
                             string that is neither epoch ms nor ISO-8601
    read_error               the segment could not be read (logged on the executor);
                             never for a damaged batch

:func:`answer_queries` (:mod:`seglake.lake.lookup_answer`) is what the executors run;
it needs no Spark (tests count its bytes in the driver process; ``Lake.lookup`` answers
in one process by it: :mod:`seglake.lake.lookup_local`). The segment reads are
:mod:`seglake.storage.point_reads` (:func:`read_offsets`, :func:`resolve_timestamps`,
re-exported here).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.lake.handle import LakeHandle
from seglake.lake.lookup_answer import (
    KEY_LOOKUP_SCHEMA,
    KEY_QUERY_SCHEMA,
    LOOKUP_SCHEMA,
    QUERY_SCHEMA,
    answer_queries,
)
from seglake.lake.lookup_keys import answer_chunk
from seglake.lake.lookup_local import CHUNK_ROWS
from seglake.lake.lookup_plan import groups, partition_arrays, segment_for
from seglake.lake.scan import check_isolation_level
from seglake.lake.snapshot import Snapshot
from seglake.location import LakeLocation, Root
from seglake.spark.lookup_queries import normalize_queries
from seglake.storage.index_cache import get_cache
from seglake.storage.point_reads import read_offsets, resolve_timestamps

if TYPE_CHECKING:
    from pyspark import Accumulator, Broadcast
    from pyspark.sql import DataFrame, SparkSession

    Parts = Broadcast[dict[Any, dict[str, Any]]]  # the broadcast of partition_arrays

DEFAULT_CHUNK_ROWS = CHUNK_ROWS  # queries answered together (one decode) by a task
TASK_QUERIES = 25_000  # queries per task when the plan's statistics count them
_KEEP_BROADCASTS = 4  # catalog versions whose broadcast a driver keeps
_BROADCASTS: dict[tuple[str, str, int], Parts] = {}  # (application, catalog, version) -> broadcast
_BROADCASTS_LOCK = threading.Lock()
_QUERY_BYTES = 8  # a query's least size in a plan's statistics (parquet: about 7 bytes)

__all__ = [
    "LOOKUP_SCHEMA",
    "QUERY_SCHEMA",
    "answer_queries",
    "lookup",
    "partition_arrays",
    "read_offsets",
    "resolve_timestamps",
]


def lookup(
    spark: SparkSession,
    root: Root | LakeHandle,
    queries_df: Any,
    *,
    version: int | None = None,
    cache_bytes: int | None = None,
    num_tasks: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    io_accumulators: tuple[Accumulator[int], Accumulator[int]] | None = None,
    on_corrupt: str = "raise",
    skipped_accumulator: Accumulator[list[str]] | None = None,
    latest_per_key: bool = False,
    isolation_level: str = "read_uncommitted",
) -> DataFrame:
    """Answer point queries; one output row (schema :data:`LOOKUP_SCHEMA`) per query.

    Args:
        spark: the session.
        root: lake root.
        queries_df: a DataFrame (Spark, or pandas / Arrow on the driver) with columns
            ``topic``, ``partition`` and ``offset`` and/or ``timestamp``
            (epoch ms, a Spark timestamp, or strings: epoch ms or ISO-8601; -2 earliest, -1
            latest, -3 max timestamp).
            Per row exactly one of offset/timestamp is non-null; or a ``key`` column
            (string: its UTF-8 bytes, or binary): a row with a key and no offset nor
            timestamp is a key query, ``partition`` null (or no column) asks every
            partition of the topic (:mod:`seglake.lake.lookup_keys`).
        version: catalog version to read (default: the current one, pinned).
        cache_bytes: ``seglake.index.cache.bytes`` for the executors' index cache.
        num_tasks: ``None`` (default): answer the queries where they are, one pass, no
            shuffle (a small query set coalesced into one task per
            :data:`TASK_QUERIES`: :func:`_few_tasks`; with a ``key`` column into at
            least ``defaultParallelism`` tasks, as the frame's partitions allow). A
            number:
            first repartition them into that many tasks by segment, so that each
            segment's queries meet in one task (worth it when many queries share
            batches).
        chunk_rows: queries a task answers together (one decode call).
        io_accumulators: two Spark accumulators that receive the bytes the tasks read
            (index and log files) and the files they opened.
        on_corrupt: a damaged batch fails the task with CorruptRecordError (``"raise"``)
            or is skipped (``"skip"``: status ``corrupt_batch`` for offsets in it).
        skipped_accumulator: a list accumulator that receives one line per batch skipped.
        latest_per_key: a key query answers only its key's last record per partition
            (the compacted view), not every one.
        isolation_level: ``read_committed``: key queries leave out the records of
            aborted transactions (offset and time queries answer the record at the
            offset or time as Kafka's default, read_uncommitted, does).

    Key queries: the broadcast is the same (each partition's segments are what routes
    a key query); the task that holds a key query asks every segment of its
    partition(s) through the segment's ``.keyindex`` (filter, then exact level, then
    the records; no usable index: scanned and logged), read where the task runs. With
    a ``key`` column the rows are :data:`KEY_LOOKUP_SCHEMA` (``query_key`` before
    ``status``), a key query's matching records each one row.
    """
    from seglake.config import LogConfig
    from seglake.spark.session import spark_schema

    check_isolation_level(isolation_level)
    lake = LakeHandle.open(root)  # parsed once (a handle: the job's)
    catalog = lake.catalog
    version = catalog.version() if version is None else version
    bc = _broadcast(spark, lake, version)
    if not hasattr(queries_df, "mapInArrow"):  # pandas or Arrow, on the driver
        queries_df = spark.createDataFrame(queries_df)
    q = normalize_queries(queries_df)
    qschema = KEY_QUERY_SCHEMA if "query_key" in q.columns else QUERY_SCHEMA
    answer = _answers(
        lake.location,
        qschema,
        (latest_per_key, isolation_level),
        bc,
        version,
        LogConfig().index_cache_bytes if cache_bytes is None else cache_bytes,
        chunk_rows,
        io_accumulators or (None, None),
        on_corrupt,
        skipped_accumulator,
    )
    if not num_tasks:
        few = _few_tasks(queries_df)
        if few is not None:  # one stage, no exchange: 10,000 queries are one task
            if qschema is KEY_QUERY_SCHEMA:  # a key query reads every segment of its
                # partition(s): as many tasks as cores (when the frame has them)
                few = max(few, spark.sparkContext.defaultParallelism)
            q = q.coalesce(few)
    else:
        q = (
            q.mapInArrow(_segment_keys(bc, qschema), spark_schema(_keyed(qschema)))
            .repartition(num_tasks, "topic", "partition", "_seg")
            .sortWithinPartitions("topic", "partition", "_seg")
        )
    out = KEY_LOOKUP_SCHEMA if qschema is KEY_QUERY_SCHEMA else LOOKUP_SCHEMA
    return q.mapInArrow(answer, spark_schema(out))


def _keyed(qschema: pa.Schema) -> pa.Schema:
    return qschema.append(pa.field("_seg", pa.int32()))


def _answers(
    root: LakeLocation,
    qschema: pa.Schema,
    keys_how: tuple[bool, str],
    bc: Parts,
    version: int,
    cache_bytes: int,
    chunk_rows: int,
    accs: tuple[Accumulator[int] | None, Accumulator[int] | None],
    on_corrupt: str,
    skipped_accumulator: Accumulator[list[str]] | None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """What a task runs (mapInArrow): its queries (``qschema``), ``chunk_rows`` at a
    time, answered by :func:`~seglake.lake.lookup_keys.answer_chunk` against the
    broadcast ``bc`` (the bytes and files read counted into ``accs``, the batches
    skipped into ``skipped_accumulator``); key queries as ``keys_how`` says (latest
    per key, isolation level)."""
    latest_per_key, isolation_level = keys_how

    def answer(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts, cache = bc.value, get_cache(cache_bytes)
        pending: list[pa.RecordBatch] = []
        for b in itertools.chain(batches, [None]):
            if b is not None and b.num_rows:
                # (columns Spark knows are never null come marked so: the schema's
                # nullable fields take them)
                pending.append(
                    pa.RecordBatch.from_arrays(b.select(qschema.names).columns, schema=qschema)
                )
            if pending and (b is None or sum(x.num_rows for x in pending) >= chunk_rows):
                skipped: list[str] = []
                with lakefs.IO_STATS.counting(*accs, keys=("bytes_read", "files_opened")):
                    out = answer_chunk(
                        root,
                        parts,
                        cache,
                        pa.Table.from_batches(pending, qschema),
                        latest_per_key=latest_per_key,
                        on_corrupt=on_corrupt,
                        skipped=skipped,
                        version=version,
                        isolation_level=isolation_level,
                    )
                if skipped and skipped_accumulator is not None:
                    skipped_accumulator.add(skipped)
                yield from out.to_batches()
                pending = []

    return answer


def _segment_keys(
    bc: Parts, qschema: pa.Schema
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``num_tasks`` pass (mapInArrow): each query keyed by its segment (``_seg``,
    :func:`segment_for` in the broadcast ``bc``; -1 for a key query, which asks every
    segment of its partition), so that a repartition puts a segment's queries
    together."""
    keyed = _keyed(qschema)

    def key(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = bc.value
        for b in batches:
            seg = np.full(b.num_rows, -1, dtype=np.int32)
            off = b.column(2).fill_null(-1).to_numpy(zero_copy_only=False)
            ts = b.column(3).fill_null(-9).to_numpy(zero_copy_only=False)
            for k, idx in groups(b.column(0), b.column(1)):
                if k in parts:
                    seg[idx] = segment_for(parts[k], off[idx], ts[idx])
            yield pa.RecordBatch.from_arrays([*b.columns, pa.array(seg, pa.int32())], schema=keyed)

    return key


def _broadcast(spark: SparkSession, lake: LakeHandle, version: int) -> Parts:
    """The broadcast of :func:`partition_arrays` of the lake's snapshot at ``version``,
    made once per Spark context (a version's rows never change; the last few are kept)."""
    key = (spark.sparkContext.applicationId, lake.catalog.uri, version)
    with _BROADCASTS_LOCK:
        bc = _BROADCASTS.pop(key, None)
    if bc is None:
        snapshot = Snapshot.read(lake, version=version)
        bc = spark.sparkContext.broadcast(partition_arrays(snapshot))
    with _BROADCASTS_LOCK:
        _BROADCASTS[key] = bc
        while len(_BROADCASTS) > _KEEP_BROADCASTS:
            _BROADCASTS.pop(next(iter(_BROADCASTS)))
    return bc


def _few_tasks(df: DataFrame) -> int | None:
    """Tasks for the queries of ``df`` by its plan's statistics (rows, or bytes at
    :data:`_QUERY_BYTES` a query): one per :data:`TASK_QUERIES`; ``None`` when the
    statistics are unknown or large (the queries then stay where they are)."""
    try:
        stats = df._jdf.queryExecution().optimizedPlan().stats()
        rows = stats.rowCount()
        n = (
            int(str(rows.get()))
            if rows.isDefined()
            else int(str(stats.sizeInBytes())) // _QUERY_BYTES
        )
    except Exception:  # no JVM plan (Spark Connect) or no statistics: leave them
        return None
    return -(-max(n, 1) // TASK_QUERIES) if n < 1000 * TASK_QUERIES else None
