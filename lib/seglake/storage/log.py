"""PartitionLog: a partition's segments in offset order, and Kafka's partition-level reads.

    segments sorted by base offset (Kafka: a skip-list map; here numpy arrays, searched
    by :class:`~seglake.storage.log_segments.LogSegments`)
    segment for offset o:  floor (largest base offset <= o)
    segment for time t:    first whose largestTimestamp (or an earlier one's) >= t

A partition directory is opened as a broker left it (``open``), or from the lake's
committed segments (``from_refs``: :class:`~seglake.storage.segment_ref.SegmentRef`),
in which case sizes, next offsets and largest timestamps come from the catalog and no
file is listed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.config import LogConfig
from seglake.errors import SegmentNotFoundError
from seglake.record.batch import SkippedBatch
from seglake.record.schema import empty_records
from seglake.storage.log_segments import NONE, LogSegments
from seglake.storage.naming import (
    LOG_SUFFIX,
    parse_partition_dir,
    parse_segment_file_name,
)
from seglake.storage.segment import DEFAULT_INTERVAL, LogSegment, TimestampOffset
from seglake.storage.segment_files import Pin
from seglake.storage.segment_ref import SegmentRef
from seglake.storage.writer import SegmentInfo, SegmentWriter

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class PartitionLog:
    """A topic-partition's log: segments in offset order."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        directory: str,
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int | None = None,
    ) -> None:
        self.fs = fs
        self.directory = directory.rstrip("/")
        self.segments = sorted(segments, key=lambda s: s.base_offset)
        self.base_offsets = np.array([s.base_offset for s in self.segments], dtype=np.int64)
        self._searched: LogSegments | None = None
        self._log_start_offset = log_start_offset
        name = self.directory.rsplit("/", 1)[-1]
        try:
            self.topic, self.partition = parse_partition_dir(name)
        except Exception:
            self.topic, self.partition = name, -1

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory!r}, segments={len(self.segments)}, "
            f"offsets={self.log_start_offset}..{self.log_end_offset})"
        )

    # -- opening ----------------------------------------------------------------------
    @classmethod
    def open(
        cls, path: str, *, index_interval_bytes: int = DEFAULT_INTERVAL, on_corrupt: str = "raise"
    ) -> PartitionLog:
        """A partition directory as a broker (or seglake) left it.

        ``.deleted``/``.cleaned``/``.swap`` files are skipped, as a reader must. A torn
        tail (the last batch of a file cut short) ends its segment; any other damage
        raises :class:`CorruptRecordError`, or with ``on_corrupt="skip"`` the damaged
        batch is skipped and reported (:attr:`skipped`).
        """
        fs, directory = lakefs.resolve(path)
        info = fs.get_file_info(directory)
        if info.type != pafs.FileType.Directory:
            raise SegmentNotFoundError(f"{path}: no such partition directory")
        segments = []
        for entry in fs.get_file_info(pafs.FileSelector(directory)):
            parsed = parse_segment_file_name(entry.base_name)
            if parsed and parsed[1] == LOG_SUFFIX:
                segments.append(
                    LogSegment(
                        fs,
                        entry.path,
                        size=entry.size,
                        index_interval_bytes=index_interval_bytes,
                        may_tear=False,
                        on_corrupt=on_corrupt,
                    )
                )
        if segments:  # only the active (last) segment may end in a torn tail
            max(segments, key=lambda s: s.base_offset).may_tear = True
        return cls(fs, directory, segments)

    @classmethod
    def from_refs(
        cls,
        fs: pafs.FileSystem,
        root: str,
        refs: Sequence[SegmentRef],
        *,
        log_start_offset: int | None = None,
        on_corrupt: str = "raise",
        replaced: Collection[int] = (),
        pin: Pin | None = None,
    ) -> PartitionLog:
        """From the committed segments of one partition (paths relative to ``root``).
        Their ``size_bytes`` are committed sizes: a batch that does not scan inside one
        is corruption, never a tail. ``replaced``: base offsets of segments a later
        catalog version replaced or removed (their file must be exactly ``size_bytes``:
        ``LogSegment(exact_size=True)``); ``pin``: the catalog version the reader is
        pinned to (:class:`~seglake.storage.segment_files.Pin`)."""
        segments = [
            ref.open(
                fs, root, on_corrupt=on_corrupt, exact_size=ref.base_offset in replaced, pin=pin
            )
            for ref in refs
        ]
        directory = lake_paths.safe_join(root, refs[-1].path).rsplit("/", 1)[0] if refs else root
        return cls(fs, directory, segments, log_start_offset=log_start_offset)

    @property
    def skipped(self) -> list[tuple[str, SkippedBatch]]:
        """``(file, batch)`` of every damaged batch skipped so far (``on_corrupt="skip"``)."""
        return [(s.log_path, b) for s in self.segments for _, b in sorted(s.skipped.items())]

    # -- offsets ----------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        if self._log_start_offset is not None:
            return self._log_start_offset
        return int(self.base_offsets[0]) if len(self.segments) else 0

    @property
    def log_end_offset(self) -> int:
        """Last offset + 1 (LEO)."""
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def max_timestamps(self) -> np.ndarray:
        return self.searched.max_timestamps

    @property
    def searched(self) -> LogSegments:
        """The segments' base offsets and largest timestamps, for Kafka's searches."""
        if self._searched is None:
            maxes = np.array([s.max_timestamp for s in self.segments], dtype=np.int64)
            self._searched = LogSegments(self.base_offsets, maxes)
        return self._searched

    def segment_index_for_offset(self, offset: int) -> int | None:
        """Index of the segment with the largest base offset <= ``offset`` (floor)."""
        if offset < self.log_start_offset or offset >= self.log_end_offset:
            return None
        i = self.searched.floor(offset)
        return i if i != NONE else None

    def segment_index_for_timestamp(self, timestamp: int) -> int | None:
        """Index of the first segment whose largest timestamp >= ``timestamp``."""
        i = self.searched.for_time(timestamp)
        return i if i != NONE else None

    # -- reads ------------------------------------------------------------------------
    def read(self, offset: int, max_records: int = 500, *, skip_control: bool = True) -> pa.Table:
        """Up to ``max_records`` records from ``offset`` on (across segments)."""
        offset = max(offset, self.log_start_offset)  # nothing below the log start is visible
        i = self.segment_index_for_offset(offset)
        if i is None:
            return empty_records()
        parts, need, span = [], max_records, max_records
        while i < len(self.segments) and need > 0:
            # offsets may have gaps (compaction, control records skipped): read growing
            # offset spans until ``max_records`` records or the end of the segment
            bound = (
                int(self.base_offsets[i + 1]) if i + 1 < len(self.segments) else self.log_end_offset
            )
            end = min(offset + span, bound)
            t = self.segments[i].read_records(offset, end, skip_control=skip_control)
            if t.num_rows > need:
                t = t.slice(0, need)
            parts.append(t)
            need -= t.num_rows
            offset = end
            if end >= bound:
                i += 1
                span = max(need, 1)
            else:
                span *= 2
        return pa.concat_tables(parts) if parts else empty_records()

    def read_range(
        self, start_offset: int, end_offset: int, *, skip_control: bool = True
    ) -> pa.Table:
        """Records with ``start_offset <= offset < end_offset``."""
        lo = max(start_offset, self.log_start_offset)
        hi = min(end_offset, self.log_end_offset)
        if hi <= lo:
            return empty_records()
        first = self.segment_index_for_offset(lo)
        last = self.segment_index_for_offset(hi - 1)
        parts = [
            self.segments[i].read_records(lo, hi, skip_control=skip_control)
            for i in range(first or 0, (last if last is not None else -1) + 1)
        ]
        return pa.concat_tables(parts) if parts else empty_records()

    def offsets_for_times(self, timestamp: int) -> TimestampOffset | None:
        """Kafka's ``offsetsForTimes``/ListOffsets for one partition.

        ``timestamp >= 0``: the first record with timestamp >= it (``None`` if none);
        ``-2`` earliest: (-1, log start offset); ``-1`` latest: (-1, log end offset);
        ``-3``: the first record carrying the largest timestamp.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampOffset(-1, self.log_end_offset)
        if timestamp == MAX_TIMESTAMP:
            if not self.segments:
                return None
            top = self.searched.largest()
            if top == NONE or int(self.max_timestamps[top]) < 0:
                return None
            largest = int(self.max_timestamps[top])
            return self.segments[top].find_offset_by_timestamp(largest, self.log_start_offset)
        if timestamp < 0:
            raise ValueError(f"timestamp {timestamp}: expected >= 0 or -1/-2/-3")
        i = self.segment_index_for_timestamp(timestamp)
        while i is not None and i < len(self.segments):
            found = self.segments[i].find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
            i += 1
        return None

    # -- appends (local directories) --------------------------------------------------
    def append(self, records: pa.Table, *, config: LogConfig | None = None) -> list[SegmentInfo]:
        """Append offset-ordered records (internal record schema) after the log end.

        Each call starts a new segment at the log end offset (as after a broker restart;
        committed segments are never rewritten) and rolls by the usual rules.
        """
        writer = SegmentWriter(
            self.fs,
            self.directory,
            config=config or LogConfig(),
            min_offset=self.log_end_offset,
            tmp_suffix=".tmp" if lakefs.renames_atomically(self.fs) else None,
            label=f"{self.topic}-{self.partition}",
        )
        try:
            infos = writer.append(records) + writer.close()
        except BaseException:
            writer.abort()
            raise
        for info in infos:
            self.segments.append(
                LogSegment(
                    self.fs,
                    info.log_path,
                    size=info.size_bytes,
                    next_offset=info.next_offset,
                    max_timestamp=info.max_timestamp,
                )
            )
        self.base_offsets = np.array([s.base_offset for s in self.segments], dtype=np.int64)
        self._searched = None
        return infos
