"""Streaming writer of one topic-partition's segments: ``.log``, ``.index``,
``.timeindex`` and ``.keyindex`` in one pass, on any ``pyarrow.fs`` filesystem.

This is the append path of seglake: the Spark ingest task and :class:`PartitionLog`
both go through it, so the batching, roll and index rules live in one place.

    records (Arrow, offset-ordered)
      -> encode_batches (vectorised RecordBatch v2)
      -> per batch: roll_reason? -> append bytes to <base>.log, IndexBuilder.add,
         its records' keys hashed (KeyIndexBuilder.add: the key column the writer holds)
      -> on roll/close: IndexBuilder.finish, write <base>.index / <base>.timeindex (trimmed)
         and <base>.keyindex

The last, possibly unfilled, batch of every ``append`` is held back and re-planned with
the next records, so batches come out as full as one pass over all records would make
them. Memory is bounded by one Arrow chunk plus one batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.config import LogConfig
from seglake.errors import FileSystemError, InputSchemaError, OffsetOrderError
from seglake.format import LONG_MAX
from seglake.record.codecs import NAMES
from seglake.record.encode import EncodedBatches, encode_batches
from seglake.record.encode_input import bytes_column, check_timestamps, int64_column
from seglake.storage.index_builder import IndexBuilder
from seglake.storage.key_index import KeyIndexBuilder
from seglake.storage.naming import (
    INDEX_SUFFIX,
    KEY_INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    segment_file_name,
)
from seglake.storage.roll import ActiveSegment, batches_before_roll, roll_reason
from seglake.storage.stats import segment_row
from seglake.storage.tail_minima import tail_minima


@dataclasses.dataclass(frozen=True)
class SegmentInfo:
    """Metadata of one closed segment (one catalog row, less topic/partition/run)."""

    base_offset: int
    next_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    size_bytes: int
    index_entries: int
    time_index_entries: int
    codec: str
    log_path: str
    roll_reason: str | None = None
    tail_min_timestamps: list[dict[str, Any]] | None = None  # see seglake.storage.tail_minima
    index_interval_bytes: int | None = None  # log.index.interval.bytes of its indexes

    def catalog_row(self, topic: str, partition: int, path: str) -> dict[str, Any]:
        """Its catalog row (no ``run_id``/``committed_at``); ``path`` relative to the root."""
        return segment_row(topic, partition, self, path)


@dataclasses.dataclass
class _Open:
    state: ActiveSegment
    stream: pa.NativeFile
    log_path: str
    builder: IndexBuilder
    keys: KeyIndexBuilder
    records: int = 0
    min_ts: int = LONG_MAX
    max_ts: int = np.iinfo(np.int64).min
    next_offset: int = 0
    batches: list[np.ndarray] = dataclasses.field(default_factory=list)
    # (first offset, position, min timestamp) rows of each run of batches: the tail minima


class SegmentWriter:
    """Writes records of one partition into segments under ``directory``.

    Args:
        fs: the filesystem (``pyarrow.fs``) that ``directory`` is on.
        directory: the partition directory (or its staging twin).
        config: batching, compression, roll and index settings.
        min_offset: offsets must be >= this (the partition's log end offset).
        tmp_suffix: write each file under ``name + tmp_suffix`` and rename it when the
            segment closes (local/HDFS: a concurrent attempt never sees a half file).
        label: how errors name this partition (e.g. ``orders-3``).
    """

    def __init__(
        self,
        fs: pafs.FileSystem,
        directory: str,
        *,
        config: LogConfig,
        min_offset: int = 0,
        tmp_suffix: str | None = None,
        label: str | None = None,
        on_close: Callable[[SegmentInfo], None] | None = None,
        indexes: bool = True,
    ) -> None:
        self.fs = fs
        self.indexes = indexes  # False: no .index/.timeindex/.keyindex (index_interval_bytes None)
        self._key_index = indexes and config.key_index_enable  # seglake.key.index.enable
        self.directory = directory.rstrip("/")
        self.config = config
        self.tmp_suffix = tmp_suffix
        self.label = label or posixpath.basename(self.directory)
        self.on_close = on_close
        self._next_offset = min_offset
        self._pending: pa.Table | None = None
        self._open: _Open | None = None
        self._closed: list[SegmentInfo] = []
        self._dir_made = False

    # -- public -----------------------------------------------------------------------
    def append(self, records: pa.Table | pa.RecordBatch) -> list[SegmentInfo]:
        """Append offset-ordered records; returns the segments closed by rolls meanwhile."""
        if isinstance(records, pa.RecordBatch):
            records = pa.Table.from_batches([records])
        if records.num_rows == 0:
            return self._take_closed()
        self._check_first_offset(records)
        self._check_timestamps(records)
        table = (
            records
            if self._pending is None
            else pa.concat_tables(
                [
                    self._pending,
                    records.select(self._pending.column_names).cast(self._pending.schema),
                ]
            )
        )
        self._pending = None
        runs = _timestamp_type_runs(table)
        for i, run in enumerate(runs):
            self._encode_and_write(run, hold_back_last=i == len(runs) - 1)
        return self._take_closed()

    def close(self) -> list[SegmentInfo]:
        """Flush held-back records, close the active segment; returns closed segments."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._encode_and_write(pending, hold_back_last=False)
        if self._open is not None:
            self._close_segment(None)
        return self._take_closed()

    def abort(self) -> None:
        """Close streams without publishing anything (files stay as garbage to clean)."""
        if self._open is not None:
            try:
                self._open.stream.close()
            finally:
                self._open = None

    @property
    def next_offset(self) -> int:
        """The offset the next record must be at or above."""
        return self._next_offset

    # -- internals --------------------------------------------------------------------
    def _check_timestamps(self, records: pa.Table) -> None:
        """Refuse what Kafka's producer refuses: timestamps below 0 (-1 means "none")."""
        try:
            check_timestamps(int64_column(records, "timestamp"))
        except InputSchemaError as exc:
            raise InputSchemaError(f"{self.label}: {exc}") from None

    def _check_first_offset(self, records: pa.Table) -> None:
        first = records.column("offset")[0].as_py()
        if first < self._next_offset:
            raise OffsetOrderError(
                f"{self.label}: offset {first} goes backwards: offsets must be >= "
                f"{self._next_offset} (the log end offset or the last offset written + 1)"
            )

    def _encode_and_write(self, table: pa.Table, *, hold_back_last: bool) -> None:
        batches = encode_batches(
            table,
            config=self.config,
            timestamp_type=int(table.column("timestamp_type")[0].as_py())
            if "timestamp_type" in table.column_names
            else 0,
        )
        n = len(batches)
        if hold_back_last and n:
            self._pending = _own_copy(table.slice(int(batches.record_start[n - 1])))
            n -= 1
        if n:
            self._write_batches(batches, n, table)
            self._next_offset = int(batches.last_offset[n - 1]) + 1

    def _write_batches(self, b: EncodedBatches, n: int, table: pa.Table) -> None:
        """Batches ``[0, n)`` of ``b`` into segments: the roll rules asked before each run
        of batches that needs no roll, each run accounted in one step (indexes:
        ``IndexBuilder.add_batches``, Kafka's per-batch rule vectorised)."""
        data = memoryview(b.data) if not isinstance(b.data, np.ndarray) else memoryview(b.data.data)
        self._check_sizes(b, n)
        i = 0
        while i < n:
            seg = self._open
            if seg is not None:
                reason = roll_reason(
                    seg.state,
                    batch_size=int(b.size[i]),
                    batch_last_offset=int(b.last_offset[i]),
                    batch_max_timestamp=int(b.max_timestamp[i]),
                    config=self.config,
                )
                if reason:
                    self._close_segment(reason)
                    seg = None
            if seg is None:
                seg = self._open_segment(int(b.base_offset[i]))
            run = batches_before_roll(
                seg.state, b.size[i:n], b.last_offset[i:n], b.max_timestamp[i:n], self.config
            )
            i += self._append_run(seg, b, i, i + run, data, table)

    def _check_sizes(self, b: EncodedBatches, n: int) -> None:
        """Kafka's ``max.message.bytes`` rule (``RecordTooLargeException``): no batch
        larger than it is appended."""
        over = np.flatnonzero(b.size[:n] > self.config.max_message_bytes)
        if len(over):
            k = int(over[0])
            raise InputSchemaError(
                f"{self.label}: the record batch of offsets {int(b.base_offset[k])}.."
                f"{int(b.last_offset[k])} is {int(b.size[k])} bytes, over max.message.bytes="
                f"{self.config.max_message_bytes} (Kafka refuses it: RecordTooLargeException; "
                "raise the topic's max.message.bytes or lower batch.size)"
            )

    def _append_run(
        self, seg: _Open, b: EncodedBatches, i: int, j: int, data: memoryview, table: pa.Table
    ) -> int:
        """Batches ``[i, j)`` (or a prefix: an index became full) of ``table``'s records
        into the open segment; how many went in."""
        st = seg.state
        size = b.size[i:j]
        pos = st.size + np.concatenate(([0], np.cumsum(size[:-1])))
        k = seg.builder.add_batches(pos, size, b.last_offset[i:j], b.max_timestamp[i:j])
        if k == 0:  # as add_batch would refuse it: written, indexes unchanged
            k = 1
        if st.size == 0:
            st.rolling_timestamp = int(b.max_timestamp[i])
        run = slice(i, i + k)
        seg.batches.append(np.stack([b.base_offset[run], pos[:k], b.min_timestamp[run]]))
        lo, hi = int(b.position[i]), int(b.position[i + k - 1] + b.size[i + k - 1])
        with self._writing(seg.log_path):
            seg.stream.write(data[lo:hi])
        st.size += hi - lo
        st.index_full = seg.builder.is_full
        if self._key_index:
            r0 = int(b.record_start[i])
            r1 = r0 + int(b.records_count[run].sum())
            rows = table.slice(r0, r1 - r0)
            seg.keys.add(bytes_column(rows, "key", r1 - r0), int64_column(rows, "offset"))
        seg.records += int(b.records_count[run].sum())
        seg.min_ts = min(seg.min_ts, int(b.min_timestamp[run].min()))
        seg.max_ts = max(seg.max_ts, int(b.max_timestamp[run].max()))
        seg.next_offset = int(b.last_offset[i + k - 1]) + 1
        return k

    @contextlib.contextmanager
    def _writing(self, path: str) -> Iterator[None]:
        """A refused write (a full disk, a read-only file system, a file past the size
        limit): the error names the file; the open stream is closed (its file stays as
        staged garbage for the run's cleanup)."""
        try:
            with lakefs.writing(path):
                yield
        except FileSystemError:
            with contextlib.suppress(OSError):
                self.abort()
            raise

    def _path(self, base_offset: int, suffix: str) -> str:
        return f"{self.directory}/{segment_file_name(base_offset, suffix)}"

    def _open_segment(self, base_offset: int) -> _Open:
        if not self._dir_made:
            with lakefs.writing(self.directory):
                lakefs.make_dirs(self.fs, self.directory)
            self._dir_made = True
        log_path = self._path(base_offset, LOG_SUFFIX)
        with self._writing(log_path):
            stream = self.fs.open_output_stream(log_path + (self.tmp_suffix or ""))
        builder = IndexBuilder(
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=self.config.max_index_entries,
            max_time_index_entries=self.config.max_time_index_entries,
        )
        self._open = _Open(
            ActiveSegment(base_offset),
            stream,
            log_path,
            builder,
            KeyIndexBuilder(base_offset),
            next_offset=base_offset,
        )
        return self._open

    def _close_segment(self, reason: str | None) -> None:
        seg, self._open = self._open, None
        if seg is None:
            return
        with self._writing(seg.log_path):
            seg.stream.close()
        seg.builder.finish()
        base = seg.state.base_offset
        files: dict[str, list[bytes | memoryview] | None] = {LOG_SUFFIX: None}
        if self.indexes:
            files[INDEX_SUFFIX] = [seg.builder.offset_index.to_bytes()]
            files[TIME_INDEX_SUFFIX] = [seg.builder.time_index.to_bytes()]
        if self._key_index:
            files[KEY_INDEX_SUFFIX] = seg.keys.finish(seg.next_offset).parts()
        for suffix, payload in files.items():
            path = self._path(base, suffix)
            if payload is not None:
                with (
                    self._writing(path),
                    self.fs.open_output_stream(path + (self.tmp_suffix or "")) as out,
                ):
                    for piece in payload:
                        out.write(piece)
            if self.tmp_suffix:
                self.fs.move(path + self.tmp_suffix, path)
        firsts, positions, min_ts = np.concatenate(seg.batches, axis=1).astype(np.int64)
        info = SegmentInfo(
            base_offset=base,
            next_offset=seg.next_offset,
            record_count=seg.records,
            min_timestamp=seg.min_ts,
            max_timestamp=seg.max_ts,
            size_bytes=seg.state.size,
            index_entries=len(seg.builder.offset_index),
            time_index_entries=len(seg.builder.time_index),
            codec=NAMES[self.config.codec],
            log_path=seg.log_path,
            roll_reason=reason,
            tail_min_timestamps=tail_minima(firsts, positions, min_ts, seg.state.size),
            index_interval_bytes=self.config.index_interval_bytes if self.indexes else None,
        )
        self._closed.append(info)
        if self.on_close is not None:
            self.on_close(info)

    def _take_closed(self) -> list[SegmentInfo]:
        out, self._closed = self._closed, []
        return out


def _own_copy(table: pa.Table) -> pa.Table:
    """``table`` in buffers of its own: a held-back slice would keep the caller's whole
    input batches alive until the next append."""
    return table.take(pa.array(np.arange(table.num_rows)))


def _timestamp_type_runs(table: pa.Table) -> list[pa.Table]:
    """Split where a batch may not continue: the timestamp type changes, or, inside
    LogAppendTime records, the timestamp changes (one append time per batch)."""
    if "timestamp_type" not in table.column_names or table.num_rows < 2:
        return [table]
    tt = table.column("timestamp_type").to_numpy()
    if not tt.any():
        return [table]
    ts = table.column("timestamp").to_numpy()
    change = (tt[1:] != tt[:-1]) | ((tt[1:] == 1) & (ts[1:] != ts[:-1]))
    cuts = np.nonzero(change)[0] + 1
    if not len(cuts):
        return [table]
    bounds = [0, *cuts.tolist(), table.num_rows]
    return [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
