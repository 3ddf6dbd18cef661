"""Ingest: message data -> Kafka partition logs in a lake, published atomically.

    input DataFrame
      -> normalize (validate, internal columns)                       spark/normalize.py
      -> [partition = murmur2(key) % N]                                record/partitioner.py
      -> count pass: records per (topic, partition) [and per input task]
      -> check topics, offsets >= log end offset; plan chunks of a hot partition
      -> prepare (mapInArrow, no shuffle): assign offsets in input order, chunk id
      -> repartitionByRange(topic, partition, chunk) + sortWithinPartitions(offset)
      -> encode (mapInArrow): SegmentWriter per (topic, partition, chunk) writes
         .log/.index/.timeindex to <root>/_staging/<run>/<topic>-<p>/, yields one row per segment
      -> driver: verify counts and contiguity, ONE Delta commit (run-id guarded),
         then move staged files into <root>/<topic>-<p>/ and drop the staging dir.

Commit first, move second: a run that loses the commit race never touches a partition
directory, and a reader of a committed row whose file is not moved yet finds it under
``_staging/<run_id>/`` (``LogSegment(staged_path=...)``). Rerunning a committed run
id finishes any pending moves and changes nothing else.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyspark.sql.functions as F
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from seglake import fs as lakefs
from seglake.catalog import Catalog
from seglake.config import LogConfig
from seglake.errors import OffsetOrderError, SeglakeError
from seglake.lake import publish_pending
from seglake.record.partitioner import default_partition
from seglake.spark.normalize import normalize
from seglake.storage.naming import partition_dir_name, validate_topic
from seglake.storage.writer import SegmentInfo, SegmentWriter

SEGMENT_ROWS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("base_offset", pa.int64()),
    ("next_offset", pa.int64()), ("record_count", pa.int64()), ("min_timestamp", pa.int64()),
    ("max_timestamp", pa.int64()), ("size_bytes", pa.int64()), ("index_entries", pa.int32()),
    ("time_index_entries", pa.int32()), ("codec", pa.string()), ("path", pa.string()),
    ("run_id", pa.string()),
])
RECORD_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]


@dataclasses.dataclass
class IngestResult:
    """What an ingest run did."""

    run_id: str
    committed: bool
    already_committed: bool
    segments: pa.Table
    seconds: float
    catalog_version: int | None = None

    @property
    def records(self) -> int:
        return int(pa.compute.sum(self.segments["record_count"]).as_py() or 0)

    @property
    def bytes(self) -> int:
        return int(pa.compute.sum(self.segments["size_bytes"]).as_py() or 0)

    def summary(self) -> str:
        """A table for people: topics, partitions, segments, records, bytes, s, MB/s."""
        if self.already_committed:
            return f"run {self.run_id} was already committed: nothing to do"
        seg = self.segments.to_pandas()
        lines = [f"{'topic':<24}{'partitions':>11}{'segments':>10}{'records':>12}"
                 f"{'bytes':>14}"]
        for topic, g in seg.groupby("topic"):
            lines.append(f"{topic:<24}{g['partition'].nunique():>11}{len(g):>10}"
                         f"{int(g['record_count'].sum()):>12,}{int(g['size_bytes'].sum()):>14,}")
        mbs = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        lines.append(f"{'total':<24}{seg.groupby(['topic', 'partition']).ngroups:>11}"
                     f"{len(seg):>10}{self.records:>12,}{self.bytes:>14,}")
        lines.append(f"run {self.run_id}: {self.seconds:.1f} s, {mbs:.1f} MB/s, "
                     f"catalog version {self.catalog_version}")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _PartitionPlan:
    """How one topic-partition is written: offsets and the chunks (tasks) it is cut in."""

    first_offset: int      # first offset this run writes (assigned) or min given offset
    last_offset: int
    count: int
    chunks: int
    chunk0: int            # global chunk id of this partition's first chunk
    log_end_offset: int


def new_run_id() -> str:
    """A sortable, unique run id: UTC time + random suffix."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def ingest(spark: SparkSession, df: DataFrame, root: str, *, run_id: str | None = None,
           conf: LogConfig | Mapping[str, Any] | None = None, topic: str | None = None,
           num_partitions: int | None = None, fail_after_records: int | None = None
           ) -> IngestResult:
    """Write ``df`` (Spark Kafka source shape) into the lake at ``root``.

    Args:
        spark: the session.
        df: input; only ``value`` is required (see schemas/input.json).
        root: lake root URI (local path, file://, s3://...).
        run_id: idempotency key; rerunning a committed run id is a no-op.
        conf: a :class:`LogConfig` or Kafka-named overrides (``{"log.segment.bytes": ...}``).
        topic: topic of every row when ``df`` has no topic column.
        num_partitions: partitions for Kafka's default partitioner when ``df`` has no
            partition column (default: the topic's partitions in the catalog, else
            ``num.partitions``).
        fail_after_records: testing hook: make each encode task fail after this many
            records (a crash mid-write).
    """
    started = time.time()
    config = conf if isinstance(conf, LogConfig) else LogConfig.load(overrides=conf)
    run_id = run_id or new_run_id()
    catalog = Catalog(root)
    if catalog.run_committed(run_id):
        publish_pending(root, run_id)
        return IngestResult(run_id, False, True, SEGMENT_ROWS.empty_table(),
                            time.time() - started, catalog.version())
    fs, base = lakefs.resolve(root)
    staging = lakefs.join(base, "_staging", run_id)
    lakefs.delete_dir(fs, staging)  # a failed earlier attempt of this run id
    try:
        rows, has_offset = _write(spark, df, root, run_id, config, topic, num_partitions,
                                  catalog, started, fail_after_records)
        if rows.num_rows == 0:
            lakefs.delete_dir(fs, staging)
            return IngestResult(run_id, False, False, rows, time.time() - started,
                                catalog.version() if catalog.exists() else None)
        result = catalog.commit(rows, run_id, contiguous=not has_offset)
    except BaseException:
        lakefs.delete_dir(fs, staging)
        raise
    if result.already_committed:
        lakefs.delete_dir(fs, staging)
        return IngestResult(run_id, False, True, SEGMENT_ROWS.empty_table(),
                            time.time() - started, catalog.version())
    publish_pending(root, run_id, rows)
    return IngestResult(run_id, True, False, rows, time.time() - started, result.version)


def _write(spark: SparkSession, df: DataFrame, root: str, run_id: str, config: LogConfig,
           topic: str | None, num_partitions: int | None, catalog: Catalog, started: float,
           fail_after_records: int | None) -> tuple[pa.Table, bool]:
    if topic is not None:
        validate_topic(topic)
    norm = normalize(df, topic=topic, log_append_time_ms=int(started * 1000),
                     timestamp_type=config.timestamp_type)
    leo = catalog.log_end_offsets() if catalog.exists() else {}
    has_partition = "partition" in norm.columns
    has_offset = "offset" in norm.columns
    if not has_partition:
        norm = _with_default_partition(norm, topic, num_partitions, leo, config)
    plans, task_starts = _count_and_plan(norm, has_offset, leo, config)
    if not plans:
        return SEGMENT_ROWS.empty_table(), has_offset
    prepared = _prepare(norm, plans, task_starts, has_offset)
    num_tasks = sum(p.chunks for p in plans.values())
    shuffled = (prepared.repartitionByRange(num_tasks, "topic", "partition", "_chunk")
                .sortWithinPartitions("topic", "partition", "_chunk", "offset"))
    encode = _encode_task(root, run_id, config, {k: p.log_end_offset for k, p in plans.items()},
                          fail_after_records)
    out = shuffled.mapInArrow(encode, _spark_schema(SEGMENT_ROWS))
    rows = out.toArrow().cast(SEGMENT_ROWS).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("base_offset", "ascending")])
    _verify(rows, plans, has_offset)
    return rows, has_offset


def _spark_schema(schema: pa.Schema) -> str:
    kinds = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint"}
    return ", ".join(f"`{f.name}` {kinds[f.type]}" for f in schema)


def _with_default_partition(norm: DataFrame, topic: str | None, num_partitions: int | None,
                            leo: Mapping[tuple[str, int], int], config: LogConfig
                            ) -> DataFrame:
    """Kafka's default partitioner over the key, per input task."""
    existing = {t: 0 for t, _ in leo}
    for t, p in leo:
        existing[t] = max(existing[t], p + 1)
    if num_partitions is None:
        counts = set(existing.values())
        num_partitions = counts.pop() if len(counts) == 1 and topic in existing else (
            existing.get(topic or "", 0) or config.num_partitions)
    n = int(num_partitions)
    if n < 1:
        raise SeglakeError(f"--num-partitions must be >= 1, got {n}")

    def assign(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        null_start = (ctx.partitionId() * 7919) if ctx else 0
        for b in batches:
            keys = b.column("key")
            parts = default_partition(keys, n, null_start=null_start)
            null_start += keys.null_count
            yield pa.RecordBatch.from_arrays([*b.columns, pa.array(parts, pa.int32())],
                                             names=[*b.schema.names, "partition"])

    schema = T.StructType([*norm.schema.fields, T.StructField("partition", T.IntegerType(), False)])
    return norm.mapInArrow(assign, schema)


def _count_and_plan(norm: DataFrame, has_offset: bool, leo: Mapping[tuple[str, int], int],
                    config: LogConfig
                    ) -> tuple[dict[tuple[str, int], _PartitionPlan],
                               dict[tuple[int, str, int], int]]:
    """The count pass: per (topic, partition) counts (and per input task when offsets are
    assigned), validated against the catalog's log end offsets before anything is written."""
    if has_offset:
        stats = (norm.groupBy("topic", "partition")
                 .agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo"),
                      F.max("offset").alias("hi")).collect())
        per_task = []
    else:
        per_task = (norm.groupBy(F.spark_partition_id().alias("task"), "topic", "partition")
                    .count().collect())
        agg: dict[tuple[str, int], int] = {}
        for r in per_task:
            agg[(r["topic"], r["partition"])] = agg.get((r["topic"], r["partition"]), 0) + r[
                "count"]
        stats = [dict(topic=t, partition=p, n=n, lo=None, hi=None) for (t, p), n in agg.items()]
    plans: dict[tuple[str, int], _PartitionPlan] = {}
    chunk0 = 0
    for r in sorted(stats, key=lambda r: (r["topic"], r["partition"])):
        t, p, n = r["topic"], r["partition"], int(r["n"])
        if t is None or p is None:
            raise SeglakeError(f"{n} input rows have a null topic or partition")
        partition_dir_name(t, p)  # validates both before any file is touched
        end = leo.get((t, p), 0)
        if has_offset:
            lo, hi = int(r["lo"]), int(r["hi"])
            if lo < end:
                raise OffsetOrderError(
                    f"{t}-{p}: input offset {lo} is below the partition's log end offset {end}"
                    f" (offsets {lo}..{hi} in the input; the lake already holds up to {end - 1})")
            if hi - lo + 1 < n:
                raise OffsetOrderError(
                    f"{t}-{p}: {n} records but offsets {lo}..{hi} span only {hi - lo + 1}: "
                    "offsets repeat")
        else:
            lo, hi = end, end + n - 1
        chunks = max(1, math.ceil(n / config.task_max_records))
        plans[(t, p)] = _PartitionPlan(lo, hi, n, chunks, chunk0, end)
        chunk0 += chunks
    task_starts: dict[tuple[int, str, int], int] = {}
    if not has_offset:
        nxt = {k: p.first_offset for k, p in plans.items()}
        for r in sorted(per_task, key=lambda r: (r["topic"], r["partition"], r["task"])):
            key = (r["topic"], r["partition"])
            task_starts[(r["task"], *key)] = nxt[key]
            nxt[key] += r["count"]
    return plans, task_starts


def _prepare(norm: DataFrame, plans: dict[tuple[str, int], _PartitionPlan],
             task_starts: dict[tuple[int, str, int], int], has_offset: bool) -> DataFrame:
    """Add ``offset`` (assigned in input order) and ``_chunk`` (which task writes it)."""

    def prepare(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx else 0
        nxt: dict[tuple[str, int], int] = {}
        for b in batches:
            if b.num_rows == 0:
                continue
            topics = b.column("topic").to_numpy(zero_copy_only=False)
            parts = b.column("partition").to_numpy()
            offsets = (b.column("offset").to_numpy() if has_offset
                       else np.empty(b.num_rows, dtype=np.int64))
            chunk = np.empty(b.num_rows, dtype=np.int32)
            for (t, p), idx in _groups(topics, parts):
                plan = plans[(t, p)]
                if not has_offset:
                    start = nxt.get((t, p), task_starts[(task, t, p)])
                    offsets[idx] = start + np.arange(len(idx))
                    nxt[(t, p)] = start + len(idx)
                span = plan.last_offset - plan.first_offset + 1
                chunk[idx] = plan.chunk0 + (offsets[idx] - plan.first_offset) * plan.chunks // span
            cols = [c for n, c in zip(b.schema.names, b.columns, strict=True) if n != "offset"]
            names = [n for n in b.schema.names if n != "offset"]
            yield pa.RecordBatch.from_arrays([*cols, pa.array(offsets), pa.array(chunk)],
                                             names=[*names, "offset", "_chunk"])

    base = norm.drop("offset") if has_offset else norm
    schema = T.StructType([*base.schema.fields, T.StructField("offset", T.LongType(), False),
                           T.StructField("_chunk", T.IntegerType(), False)])
    return norm.mapInArrow(prepare, schema)


def _groups(topics: np.ndarray, parts: np.ndarray) -> list[tuple[tuple[str, int], np.ndarray]]:
    """Row indices of each (topic, partition) in a batch, in row order."""
    if len(topics) and (topics[0] == topics).all() and (parts[0] == parts).all():
        return [((str(topics[0]), int(parts[0])), np.arange(len(topics)))]
    keys: dict[tuple[str, int], list[int]] = {}
    for i, key in enumerate(zip(topics.tolist(), parts.tolist(), strict=True)):
        keys.setdefault(key, []).append(i)
    return [(k, np.asarray(v)) for k, v in keys.items()]


def _encode_task(root: str, run_id: str, config: LogConfig,
                 log_end: dict[tuple[str, int], int], fail_after_records: int | None):
    """The mapInArrow function that writes segments of its sorted rows to staging."""

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = (f".tmp-{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}"
                   if ctx else ".tmp")
        fs, base = lakefs.resolve(root)
        tmp_suffix = attempt if lakefs.renames_atomically(fs) else None
        writer: SegmentWriter | None = None
        key: tuple[str, int, int] | None = None
        infos: list[tuple[str, int, SegmentInfo]] = []
        written = 0

        def finish() -> None:
            if writer is not None and key is not None:
                infos.extend((key[0], key[1], i) for i in writer.close())

        for b in batches:
            if b.num_rows == 0:
                continue
            for lo, hi in _key_runs(b):
                run_key = (b.column("topic")[lo].as_py(), b.column("partition")[lo].as_py(),
                           b.column("_chunk")[lo].as_py())
                if run_key != key:
                    finish()
                    key = run_key
                    pdir = partition_dir_name(key[0], key[1])
                    writer = SegmentWriter(fs, lakefs.join(base, "_staging", run_id, pdir),
                                           config=config, min_offset=log_end[key[:2]],
                                           tmp_suffix=tmp_suffix, label=pdir)
                records = pa.Table.from_batches([b.slice(lo, hi - lo).select(RECORD_COLUMNS)])
                infos.extend((key[0], key[1], i) for i in writer.append(records))
                written += hi - lo
                if fail_after_records is not None and written >= fail_after_records:
                    raise RuntimeError(f"seglake test hook: task failed after {written} "
                                       "records (fail_after_records)")
        finish()
        if infos:
            yield _segment_rows(infos, run_id, base)

    return encode


def _key_runs(b: pa.RecordBatch) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of equal (topic, partition, _chunk) in a sorted batch."""
    chunk = b.column("_chunk").to_numpy()
    cuts = np.nonzero(chunk[1:] != chunk[:-1])[0] + 1
    bounds = [0, *cuts.tolist(), b.num_rows]
    return list(itertools.pairwise(bounds))


def _segment_rows(infos: list[tuple[str, int, SegmentInfo]], run_id: str, base: str
                  ) -> pa.RecordBatch:
    prefix = lakefs.join(base, "_staging", run_id) + "/"
    cols: dict[str, list] = {f.name: [] for f in SEGMENT_ROWS}
    for topic, partition, i in infos:
        row = dict(topic=topic, partition=partition, base_offset=i.base_offset,
                   next_offset=i.next_offset, record_count=i.record_count,
                   min_timestamp=i.min_timestamp, max_timestamp=i.max_timestamp,
                   size_bytes=i.size_bytes, index_entries=i.index_entries,
                   time_index_entries=i.time_index_entries, codec=i.codec,
                   path=i.log_path.removeprefix(prefix), run_id=run_id)
        for k, v in row.items():
            cols[k].append(v)
    return pa.RecordBatch.from_pydict(cols, schema=SEGMENT_ROWS)


def _verify(rows: pa.Table, plans: dict[tuple[str, int], _PartitionPlan], has_offset: bool
            ) -> None:
    """Before committing: every partition got exactly its records, in non-overlapping
    segments starting at or after its log end offset (assigned: exactly at it, gapless)."""
    seg = rows.to_pandas()
    for (t, p), plan in plans.items():
        g = seg[(seg.topic == t) & (seg.partition == p)]
        n = int(g.record_count.sum())
        if n != plan.count:
            raise SeglakeError(
                f"{t}-{p}: wrote {n} records but counted {plan.count} in the input: the input "
                "is not deterministic between the count pass and the write (persist it first)")
        bases, nexts = g.base_offset.to_numpy(), g.next_offset.to_numpy()
        if len(g) and (bases[1:] < nexts[:-1]).any():
            raise OffsetOrderError(f"{t}-{p}: segments overlap: bases {bases.tolist()}, "
                                   f"next offsets {nexts.tolist()}")
        if not has_offset and len(g) and (
                bases[0] != plan.log_end_offset or (bases[1:] != nexts[:-1]).any()):
            raise SeglakeError(f"{t}-{p}: assigned offsets are not contiguous from the log end "
                               f"offset {plan.log_end_offset}: bases {bases.tolist()}")
