"""The executor side of ingest: the ``mapInArrow`` functions and their pure helpers.

    count_groups        the count pass (:mod:`seglake.spark.ingest_keys`, re-exported):
                        records per (input task, topic, partition), with Kafka's default
                        partitioner over ``key`` when there is no ``partition`` (null
                        keys: round robin from ``task * 7919``), computed exactly as the
                        write pass computes it
    local_writer        no shuffle: one task = one input split; rows grouped by
                        (topic, partition), offsets from the planned per-task start,
                        buffered per group, one SegmentWriter per group
    prepare / encoder   shuffle: tag rows with partition, offset and chunk, then write
                        the sorted rows of each (topic, partition, chunk) run

Every writer stages under ``<root>/_staging/<run>/<topic>-<p>/`` and yields one
``SEGMENT_ROWS`` row per closed segment.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import SeglakeError
from seglake.lake.handle import LakeHandle
from seglake.lake_paths import STAGING_DIR
from seglake.spark.ingest_keys import (
    COUNT_ROWS,
    Batches,
    Key,
    Partitioner,
    count_groups,
    group_rows,
    task_id,
    task_keys,
)
from seglake.spark.ingest_plan import PartitionPlan
from seglake.spark.task_memory import in_task_pool
from seglake.storage.naming import partition_dir_name, run_dir
from seglake.storage.tail_minima import TAIL_TYPE
from seglake.storage.writer import SegmentInfo, SegmentWriter
from seglake.testing_hooks import crash_point

SEGMENT_ROWS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("next_offset", pa.int64()),
        ("record_count", pa.int64()),
        ("min_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("size_bytes", pa.int64()),
        ("index_entries", pa.int32()),
        ("time_index_entries", pa.int32()),
        ("codec", pa.string()),
        ("path", pa.string()),
        ("run_id", pa.string()),
        ("tail_min_timestamps", TAIL_TYPE),
        ("index_interval_bytes", pa.int32()),
    ]
)
RECORD_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]

__all__ = [  # what ingest and the stream sink call, with ingest_keys' names
    "COUNT_ROWS",
    "RECORD_COLUMNS",
    "SEGMENT_ROWS",
    "StagedWriters",
    "count_groups",
    "encoder",
    "group_rows",
    "local_writer",
    "prepare",
    "record_table",
    "segment_rows",
    "task_dir",
    "task_id",
    "task_keys",
]


def record_table(b: pa.RecordBatch, idx: np.ndarray | None, offsets: np.ndarray) -> pa.Table:
    """The writer's columns of rows ``idx`` (all if None) with the given offsets."""
    rows = b if idx is None else b.take(pa.array(idx))
    cols = [pa.array(offsets, pa.int64())] + [rows.column(c) for c in RECORD_COLUMNS[1:]]
    return pa.Table.from_arrays(cols, names=RECORD_COLUMNS)


@dataclasses.dataclass
class _Group:
    writer: SegmentWriter
    next_offset: int
    pending: list[pa.Table] = dataclasses.field(default_factory=list)  # slices of held batches


class StagedWriters:
    """SegmentWriters of one task, one per staged partition directory, and their output."""

    def __init__(
        self,
        lake: LakeHandle,
        run_id: str,
        config: LogConfig,
        tmp_suffix: str,
        fail_after_records: int | None,
        subdir: str = "",
        indexes: bool = True,
    ) -> None:
        self.fs, base = lake.fs, lake.base
        self.indexes = indexes  # index files written (SegmentWriter)
        self.staging = run_dir(base, STAGING_DIR, run_id)
        self.subdir = subdir  # under the staging dir (a one-pass task's own: task_dir)
        self.run_id = run_id
        self.config = config
        self.tmp_suffix = tmp_suffix if lakefs.renames_atomically(self.fs) else None
        self.fail_after = fail_after_records
        self.written = 0
        self.infos: list[tuple[str, int, SegmentInfo]] = []

    def open(self, key: Key, min_offset: int) -> SegmentWriter:
        pdir = partition_dir_name(*key)
        return SegmentWriter(
            self.fs,
            lakefs.join(self.staging, *([self.subdir] if self.subdir else []), pdir),
            config=self.config.for_topic(key[0]),
            min_offset=min_offset,
            tmp_suffix=self.tmp_suffix,
            label=pdir,
            indexes=self.indexes,
        )

    def append(self, key: Key, writer: SegmentWriter, records: pa.Table) -> None:
        self.infos.extend((*key, i) for i in writer.append(records))
        self.written += records.num_rows
        crash_point("write")
        if self.fail_after is not None and self.written >= self.fail_after:
            raise RuntimeError(
                f"seglake test hook: task failed after {self.written} records (fail_after_records)"
            )

    def close(self, key: Key, writer: SegmentWriter) -> None:
        self.infos.extend((*key, i) for i in writer.close())

    def rows(self) -> Batches:
        if self.infos:
            yield segment_rows(self.infos, self.run_id, self.staging)


def local_writer(
    lake: LakeHandle,
    run_id: str,
    config: LogConfig,
    num_partitions: int | None,
    task_starts: Mapping[tuple[int, str, int], int],
    fail_after_records: int | None,
    log_end: Mapping[Key, int] | None = None,
    indexes: bool = True,
) -> Callable[[Batches], Batches]:
    """mapInArrow without a shuffle: this task's records of each (topic, partition) get
    the offsets planned for (task, topic, partition) onwards, in input order, and are
    written as segments of their own. One pass (``log_end`` given, no count pass, no
    ``task_starts``): every task's pieces start at the partition's log end offset, and
    tasks after the first stage under their own :func:`task_dir`, for the driver to
    rebase (spark/ingest_rebase.py). Each input batch is reordered by group with one
    take; the groups keep zero-copy slices of it, so all groups are flushed together once
    the batches held reach ``seglake.ingest.buffer.bytes``: memory is that plus one input
    batch and one group's concatenated records (in Arrow's jemalloc pool: task_memory).
    Without ``indexes`` no index files are staged (a stream sink's pieces: see there)."""

    def write(batches: Batches) -> list[pa.RecordBatch]:
        task, suffix = task_id()
        sub = task_dir(task) if log_end is not None and task else ""
        out = StagedWriters(lake, run_id, config, suffix, fail_after_records, sub, indexes)
        part = Partitioner(num_partitions, task)
        groups: dict[Key, _Group] = {}
        held = 0  # bytes of the input batches the pending slices keep alive
        for b in batches:
            parts = part(b)
            split = group_rows(b.column("topic"), parts)
            b = b.select(RECORD_COLUMNS[1:])  # topic and partition are in the keys
            if len(split) > 1:  # one take in group order, then zero-copy slices
                b = b.take(pa.array(np.concatenate([idx for _, idx in split])))
            held += b.nbytes
            at = 0
            for key, idx in split:
                g = groups.get(key)
                if g is None:
                    start = (
                        task_starts.get((task, *key)) if log_end is None else log_end.get(key, 0)
                    )
                    if start is None:
                        raise SeglakeError(
                            f"{key[0]}-{key[1]}: input task {task} has records the count pass "
                            "did not see: the input is not deterministic (persist it first)"
                        )
                    g = groups[key] = _Group(out.open(key, start), start)
                g.pending.append(
                    record_table(
                        b.slice(at, len(idx)),
                        None,
                        np.arange(g.next_offset, g.next_offset + len(idx)),
                    )
                )
                at += len(idx)
                g.next_offset += len(idx)
            if held >= config.ingest_buffer_bytes:  # every group: frees the held batches
                for key, g in groups.items():
                    _flush(out, key, g)
                held = 0
        for key, g in groups.items():
            _flush(out, key, g)
            out.close(key, g.writer)
        return list(out.rows())

    return in_task_pool(write)


def task_dir(task: int) -> str:
    """Where a one-pass write task after the first stages its segments, under the run's
    staging dir (their offsets are rebased and the files moved out by the driver):
    ``task=<i>``, which no partition directory can be ('=' is not in a topic name)."""
    return f"task={task}"


def _flush(out: StagedWriters, key: Key, g: _Group) -> None:
    if g.pending:
        out.append(key, g.writer, pa.concat_tables(g.pending))
        g.pending = []


def prepare(
    plans: Mapping[Key, PartitionPlan],
    task_starts: Mapping[tuple[int, str, int], int],
    num_partitions: int | None,
    has_offset: bool,
    by_timestamp: bool,
    task_keys: np.ndarray,
) -> Callable[[Batches], Batches]:
    """mapInArrow before the shuffle: ``partition`` (if not given), ``offset`` (given, or
    assigned in input order; by timestamp: an input-order tie breaker that the encoder
    replaces), ``_chunk`` (global id of the task that writes the row) and ``_task`` (a
    value Spark's hash partitioning sends to exactly task ``_chunk``)."""

    def run(batches: Batches) -> Batches:
        task = task_id()[0]
        part = Partitioner(num_partitions, task)
        nxt: dict[Key, int] = {}
        seq = task << 40
        for b in batches:
            if b.num_rows == 0:
                continue
            parts = part(b)
            offsets = (
                b.column("offset").to_numpy()
                if has_offset
                else np.empty(b.num_rows, dtype=np.int64)
            )
            chunk = np.empty(b.num_rows, dtype=np.int32)
            for key, idx in group_rows(b.column("topic"), parts):
                plan = plans[key]
                if by_timestamp:
                    offsets[idx] = seq + idx
                    chunk[idx] = plan.chunk0
                    continue
                if not has_offset:
                    start = nxt.get(key, task_starts[(task, *key)])
                    offsets[idx] = start + np.arange(len(idx))
                    nxt[key] = start + len(idx)
                span = plan.last_offset - plan.first_offset + 1
                chunk[idx] = plan.chunk0 + (offsets[idx] - plan.first_offset) * plan.chunks // span
            seq += b.num_rows
            keep = [n for n in b.schema.names if n not in ("offset", "partition")]
            yield pa.RecordBatch.from_arrays(
                [
                    *(b.column(n) for n in keep),
                    pa.array(parts, pa.int32()),
                    pa.array(offsets),
                    pa.array(chunk),
                    pa.array(task_keys[chunk]),
                ],
                names=[*keep, "partition", "offset", "_chunk", "_task"],
            )

    return run


def encoder(
    lake: LakeHandle,
    run_id: str,
    config: LogConfig,
    log_end: Mapping[Key, int],
    by_timestamp: bool,
    fail_after_records: int | None,
) -> Callable[[Batches], Batches]:
    """mapInArrow after the shuffle: rows sorted by (topic, partition, _chunk, offset), or
    by (..., timestamp, offset) when offsets are assigned in timestamp order (one chunk
    per partition, numbered from its log end offset here); each run of equal ``_chunk``
    is one (topic, partition)'s offset range."""

    def encode(batches: Batches) -> list[pa.RecordBatch]:
        out = StagedWriters(lake, run_id, config, task_id()[1], fail_after_records)
        writer: SegmentWriter | None = None
        key: Key = ("", -1)  # set with writer
        chunk = None
        nxt = 0
        for b in batches:
            for lo, hi in _chunk_runs(b):
                if b.column("_chunk")[lo].as_py() != chunk:
                    if writer is not None:
                        out.close(key, writer)
                    chunk = b.column("_chunk")[lo].as_py()
                    key = (b.column("topic")[lo].as_py(), b.column("partition")[lo].as_py())
                    writer = out.open(key, log_end[key])
                    nxt = log_end[key]
                rows = b.slice(lo, hi - lo)
                if by_timestamp:
                    offsets = np.arange(nxt, nxt + rows.num_rows)
                    nxt += rows.num_rows
                else:
                    offsets = rows.column("offset").to_numpy()
                assert writer is not None  # opened at the first run
                out.append(key, writer, record_table(rows, None, offsets))
        if writer is not None:
            out.close(key, writer)
        return list(out.rows())

    return in_task_pool(encode)


def _chunk_runs(b: pa.RecordBatch) -> list[tuple[int, int]]:
    """[lo, hi) row ranges of equal ``_chunk`` in a sorted batch."""
    if b.num_rows == 0:
        return []
    chunk = b.column("_chunk").to_numpy()
    cuts = np.nonzero(chunk[1:] != chunk[:-1])[0] + 1
    return list(itertools.pairwise([0, *cuts.tolist(), b.num_rows]))


def segment_rows(
    infos: list[tuple[str, int, SegmentInfo]], run_id: str, staging: str
) -> pa.RecordBatch:
    """One SEGMENT_ROWS row per closed segment; ``path`` relative to the staging dir."""
    prefix = staging.rstrip("/") + "/"
    cols: dict[str, list[Any]] = {f.name: [] for f in SEGMENT_ROWS}
    for topic, partition, i in infos:
        row = i.catalog_row(topic, partition, i.log_path.removeprefix(prefix))
        row["run_id"] = run_id
        for k, v in row.items():
            cols[k].append(v)
    return pa.RecordBatch.from_pydict(cols, schema=SEGMENT_ROWS)
