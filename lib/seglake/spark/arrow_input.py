"""Ingest input read straight from parquet files with pyarrow (no JVM on the data path).

Pure functions (no Spark): the direct ingest path (spark/direct_ingest.py) hands each
task the file splits Spark itself planned for the input DataFrame, and the task reads
them here, in the order Spark would, as the same internal columns ``normalize`` makes:

    split = [(path, start, length), ...]      one Spark FilePartition (one input task)
      -> row groups of each (path, start, length): those whose midpoint
         (first column chunk's offset + the row group's compressed size // 2) falls in
         [start, start + length), parquet-mr's rule, so every row group is read by the
         same task as Spark's own reader would read it
      -> iter_batches(batch_size) over those row groups, only the columns needed, on the
         task's own thread (a Spark task has one core; decoding columns on Arrow's
         thread pool only held more memory)
      -> Normalizer: topic, [partition], key, value, timestamp (epoch ms),
         timestamp_type, headers, exactly as spark/normalize.py computes them
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from seglake.errors import SeglakeError
from seglake.record.schema import timestamp_millis

Split = Sequence[tuple[str, int, int]]  # (local path, start byte, length) of one task
# Rows per batch read. The reader's transient memory is a few times the batch it builds
# (one row group of bench/ingest.py's input: 64Ki-row batches of 12 MB, +91 MB peak RSS;
# 16Ki rows, 3 MB: +52 MB). Smaller batches do not change the output (batch boundaries
# follow batch.size: storage/writer.py) and cost no measurable CPU at 16Ki (RESULTS, P6).
BATCH_ROWS = 16_384
READ_BUFFER = 1 << 20  # column chunks are streamed page by page through a 1 MiB buffer
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclasses.dataclass(frozen=True)
class AppendTime:
    """``message.timestamp.type`` per row where topics differ: rows of the ``flip`` topics
    get the other type than ``default`` (LogAppendTime: ``ms``, the run's time, type 1)."""

    ms: int
    default: bool  # LogAppendTime for the topics not in flip
    flip: frozenset[str]

    def __call__(self, topics: pa.Array, ts: pa.Array, kind: pa.Array) -> tuple[pa.Array, pa.Array]:
        """``(timestamp, timestamp_type)`` with the append time where it applies."""
        appended = pc.is_in(topics, pa.array(sorted(self.flip), pa.string())).fill_null(False)
        if self.default:
            appended = pc.invert(appended)
        ms = pa.scalar(self.ms, pa.int64())
        return pc.if_else(appended, ms, ts), pc.if_else(appended, pa.scalar(1, pa.int32()), kind)


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """How to turn the input file columns into seglake's internal columns (decided on the
    driver from the DataFrame's schema, as ``normalize`` decides it)."""

    topic: str | None  # the --topic constant, else the ``topic`` column
    columns: tuple[str, ...]  # the input DataFrame's columns (file columns)
    append_time_ms: int | None  # LogAppendTime (or no timestamp column): this constant
    per_topic: AppendTime | None = None  # else: where topics differ, per row

    @property
    def has_partition(self) -> bool:
        return "partition" in self.columns

    def count_columns(self, num_partitions: int | None) -> list[str]:
        """File columns the count pass needs (as ``ingest._count`` selects them)."""
        want = [*(["topic"] if self.topic is None else [])]
        want += ["partition"] if num_partitions is None else ["key"]
        return [c for c in want if c in self.columns]

    def __call__(self, b: pa.RecordBatch, path: str) -> pa.RecordBatch:
        """The internal columns of the file columns in ``b`` (those present)."""
        n = b.num_rows
        names = b.schema.names
        cols: dict[str, pa.Array] = {}
        cols["topic"] = (
            pa.array(np.full(n, self.topic, dtype=object), pa.string())
            if self.topic is not None
            else b.column("topic").cast(pa.string())
        )
        if "partition" in names:
            part = b.column("partition").cast(pa.int32())
            if part.null_count:
                raise SeglakeError(f"{path}: {part.null_count} input rows have a null partition")
            cols["partition"] = part
        if "key" in names or "key" not in self.columns:
            cols["key"] = (
                b.column("key").cast(pa.binary()) if "key" in names else pa.nulls(n, pa.binary())
            )
        if "value" in names:
            cols["value"] = b.column("value").cast(pa.binary())
            cols["timestamp"], cols["timestamp_type"] = self._timestamps(b, path)
            if self.per_topic is not None:
                cols["timestamp"], cols["timestamp_type"] = self.per_topic(
                    cols["topic"], cols["timestamp"], cols["timestamp_type"]
                )
            cols["headers"] = (
                _headers(b.column("headers")) if "headers" in names else _no_headers(n)
            )
        return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))

    def _timestamps(self, b: pa.RecordBatch, path: str) -> tuple[pa.Array, pa.Array]:
        n = b.num_rows
        if self.append_time_ms is not None:
            return (
                pa.array(np.full(n, self.append_time_ms, np.int64)),
                pa.array(np.ones(n, np.int32)),
            )
        ts = b.column("timestamp")
        if pa.types.is_timestamp(ts.type):
            if ts.type.unit == "ns" or ts.type.tz is None:
                raise SeglakeError(f"{path}: timestamp type {ts.type} is not read directly")
            ts = timestamp_millis(ts)  # the one ms rule (floor)
        else:
            ts = ts.cast(pa.int64())
        kind = (
            b.column("timestampType").cast(pa.int32())
            if "timestampType" in b.schema.names
            else pa.array(np.zeros(n, np.int32))
        )
        return ts, kind


def _headers(h: pa.Array) -> pa.Array:
    """``coalesce(headers, array())`` cast to array<struct<key string, value binary>>."""
    if h.null_count:
        h = pc.if_else(h.is_null(), pa.scalar([], h.type), h)
    return h.cast(HEADERS)


def _no_headers(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADERS.value_type)
    )


def row_groups(meta: pq.FileMetaData, start: int, length: int) -> list[int]:
    """Row groups a reader of the byte range [start, start + length) reads: parquet-mr's
    ``filterFileMetaDataByMidpoint`` (first column chunk's first page offset, dictionary
    page included, plus half the row group's compressed column chunks)."""
    out = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        first = rg.column(0)
        offset = first.data_page_offset
        if first.has_dictionary_page and 0 <= (first.dictionary_page_offset or 0) < offset:
            offset = first.dictionary_page_offset
        size = sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
        if start <= offset + size // 2 < start + length:
            out.append(i)
    return out


def read_split(
    split: Split, columns: list[str], normalize: Normalizer, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The internal columns of one task's split, in Spark's order, ``batch_rows`` at a time;
    ``columns`` = the file columns to read (the rest are not decoded)."""
    for path, start, length in split:
        with pq.ParquetFile(path, buffer_size=READ_BUFFER, pre_buffer=False) as f:
            missing = [c for c in columns if c not in f.schema_arrow.names]
            if missing:
                raise SeglakeError(f"{path}: no column(s) {missing} in this input file")
            groups = row_groups(f.metadata, start, length)
            if not groups:
                continue
            if not columns:  # nothing to read: row counts from the footer
                for g in groups:
                    n = f.metadata.row_group(g).num_rows
                    yield from _empty_rows(n, batch_rows, normalize, path)
                continue
            for b in f.iter_batches(
                batch_size=batch_rows, row_groups=groups, columns=columns, use_threads=False
            ):
                yield normalize(b, path)


def _empty_rows(
    n: int, batch_rows: int, normalize: Normalizer, path: str
) -> Iterator[pa.RecordBatch]:
    """Batches of ``n`` rows with no file columns (count pass of keyless input)."""
    for lo in range(0, n, batch_rows):
        k = min(batch_rows, n - lo)
        yield normalize(pa.RecordBatch.from_arrays([pa.nulls(k)], names=["_"]), path)


def split_topics(split: Split, column: str | None) -> tuple[int, set[str], int]:
    """Rows of one task's split (footers), and the distinct values and nulls of its topic
    ``column`` (read as a dictionary: no string is decoded per row; ``None``: not read)."""
    rows, names, nulls = 0, set(), 0
    for path, start, length in split:
        with pq.ParquetFile(path, read_dictionary=[column] if column else None) as f:
            groups = row_groups(f.metadata, start, length)
            rows += sum(f.metadata.row_group(g).num_rows for g in groups)
            for g in groups if column else ():  # one row group's indices at a time
                for chunk in f.read_row_group(g, [column], use_threads=False).column(0).chunks:
                    nulls += chunk.null_count
                    names.update(chunk.dictionary.to_pylist())
    return rows, names, nulls
