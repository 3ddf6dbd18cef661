"""LogSegment: one ``.log`` with its ``.index``, ``.timeindex`` and ``.txnindex``, read
through ``pyarrow.fs`` with ranged reads (local disk and object storage alike).

Reads touch few bytes: each index file is read once (one ranged read), then only the
window between two index entries and the batches wanted.

    offsets [lo, hi]: offset index floor(lo) -> start; first entry with offset > hi -> end;
                      read [start, end + 61) (the header of the batch at ``end`` too),
                      then that batch whole only if it is needed.
    timestamp t:      time index strict floor (largest entry with timestamp < t) -> offset
                      -> offset index floor -> position; walk index-interval chunks to the
                      first batch with maxTimestamp >= t; its first record with ts >= t
                      (only offsets and timestamps read: ``record_times``).

An index that is missing, fails its sanity check, or points where no matching batch
starts is rebuilt from a scan of the ``.log`` (``index_source`` says so and a warning is
logged), so a broken index never yields wrong records.

Damaged bytes are never read as "not written yet" (:meth:`LogSegment._make_window`):

    torn tail   the last batch runs past the end of the file (its header has magic 2),
                or a partial header, or zeros to the end, and: in a lake (``committed``)
                the file is shorter than the catalog's ``size_bytes``; in a broker
                directory the segment is the partition's last (``may_tear``) and no
                offset index entry lies past it. The records before it are the
                segment's records (Kafka's recovery cuts there)
    corruption  anything else that does not scan (CRC, magic, length, offsets going
                backwards, a batch running past a committed size): raises
                :class:`CorruptRecordError` naming the file, position, offsets and why;
                with ``on_corrupt="skip"`` a damaged batch whose length is plausible is
                skipped instead (``skipped``, a :class:`CorruptBatchWarning` each), and
                one whose length is garbage raises even then (the rest of the segment
                cannot be found without trusting it)
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import (
    ConfigError,
    CorruptBatchWarning,
    CorruptIndexError,
    CorruptRecordError,
    SegmentNotFoundError,
)
from seglake.record.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    BatchScan,
    SkippedBatch,
    scan_batches,
)
from seglake.record.decode import decode_batches, record_times
from seglake.storage.index_builder import rebuild_indexes
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 4096
ON_CORRUPT = ("raise", "skip")  # what a read does at a damaged batch


def check_on_corrupt(value: str) -> str:
    """``value`` if it is one of :data:`ON_CORRUPT`, else :class:`ConfigError`."""
    if value not in ON_CORRUPT:
        raise ConfigError(f"on_corrupt {value!r}: expected one of {', '.join(ON_CORRUPT)}")
    return value


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


@dataclasses.dataclass
class Window:
    """Bytes of a ``.log`` starting at file position ``start``, and the whole batches in
    them (``scan`` positions are relative to ``data``)."""

    start: int
    data: bytes
    scan: BatchScan

    @property
    def positions(self) -> np.ndarray:
        """File positions of the batches."""
        return self.scan.position + self.start

    @property
    def end(self) -> int:
        """File position just past the last whole batch."""
        return self.start + self.scan.valid_bytes

    def decode(
        self,
        sel: slice | np.ndarray | None = None,
        *,
        skip_control: bool = True,
        path: str | None = None,
    ) -> pa.Table:
        scan = self.scan if sel is None else self.scan.take(sel)
        return decode_batches(self.data, scan, skip_control=skip_control, path=path)

    def record_times(
        self, sel: slice | np.ndarray | None = None, *, path: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, timestamp)`` of the records :meth:`decode` returns (control batches
        left out), checked as it checks them, with no key, value or header decoded."""
        scan = self.scan if sel is None else self.scan.take(sel)
        return record_times(self.data, scan, path=path)


class LogSegment:
    """A segment on a ``pyarrow.fs`` filesystem.

    Args:
        fs: the filesystem.
        log_path: path of the ``.log`` file (20-digit base offset name).
        size: the ``.log`` size if known (catalog), else asked of the filesystem.
        next_offset, max_timestamp: from the catalog if known, else derived on demand.
        index_interval_bytes: used when indexes must be rebuilt.
        staged_path: where the files are if ``log_path`` is missing (a committed run
            whose files were not moved out of staging yet). A segment that switched to
            the staged copy switches back once the files have moved to ``log_path``.
        committed: ``size`` is a lake's committed size (module docstring: torn tail).
        may_tear: a broker segment that may end in a torn tail (the partition's last).
        on_corrupt: ``"raise"`` (default) or ``"skip"`` damaged batches (module doc).
    """

    def __init__(
        self,
        fs: pafs.FileSystem,
        log_path: str,
        *,
        size: int | None = None,
        next_offset: int | None = None,
        max_timestamp: int | None = None,
        index_interval_bytes: int = DEFAULT_INTERVAL,
        staged_path: str | None = None,
        committed: bool = False,
        may_tear: bool = True,
        on_corrupt: str = "raise",
    ) -> None:
        parsed = parse_segment_file_name(log_path.rsplit("/", 1)[-1])
        if parsed is None or parsed[1] != LOG_SUFFIX:
            raise SegmentNotFoundError(
                f"{log_path}: not a segment .log file name (20-digit base offset + .log)"
            )
        self.fs = fs
        self.log_path = log_path
        self.base_offset = parsed[0]
        self.stem = log_path[: -len(LOG_SUFFIX)]
        self._size = size
        self._next_offset = next_offset
        self._max_timestamp = max_timestamp
        self.index_interval_bytes = index_interval_bytes
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | bool | None = False
        self.index_source = "unread"
        self._other_path = staged_path  # the copy not in use: staged, or final after a switch
        self.committed, self.may_tear = committed, may_tear
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.skipped: dict[int, SkippedBatch] = {}  # file position -> batch skipped

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path!r}, base_offset={self.base_offset})"

    def _fallback(self) -> bool:
        """Switch between the final and the staged copy (the one in use is missing: not
        moved out of staging yet, or moved since); False if the other is missing too."""
        other = self._other_path
        if other is None or not lakefs.exists(self.fs, other):
            return False
        self._other_path = self.log_path
        self.log_path, self.stem = other, other[: -len(LOG_SUFFIX)]
        return True

    def _read_range(self, start: int, length: int) -> bytes:
        try:
            return lakefs.read_range(self.fs, self.log_path, start, length)
        except SegmentNotFoundError:
            if not self._fallback():
                raise
            return lakefs.read_range(self.fs, self.log_path, start, length)

    def _read_file(self, suffix: str) -> bytes:
        try:
            return lakefs.read_all(self.fs, self.stem + suffix)
        except SegmentNotFoundError:
            if suffix == LOG_SUFFIX or not self._fallback():
                raise
            return lakefs.read_all(self.fs, self.stem + suffix)

    # -- sizes and bounds -------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of the ``.log``."""
        if self._size is None:
            try:
                self._size = lakefs.file_size(self.fs, self.log_path)
            except SegmentNotFoundError:
                if not self._fallback():
                    raise
                self._size = lakefs.file_size(self.fs, self.log_path)
        return self._size

    @property
    def next_offset(self) -> int:
        """Last offset + 1 (from the catalog, else read off the log's tail)."""
        if self._next_offset is None:
            self._derive_tail()
        return self._next_offset  # type: ignore[return-value]

    @property
    def max_timestamp(self) -> int:
        """Kafka's largestTimestamp (-1 for an empty segment)."""
        if self._max_timestamp is None:
            self._derive_tail()
        return self._max_timestamp  # type: ignore[return-value]

    def _derive_tail(self) -> None:
        oi, ti = self.offset_index, self.time_index
        start = int(oi.positions[-1]) if len(oi) else 0
        w = self.window(start, self.size)
        if (
            start > 0
            and self.index_source == "file"
            and (not len(w.scan) or int(w.scan.base_offset[0]) > int(oi.offsets[-1]))
        ):
            # the last entry does not point at the start of its batch: never guess the tail
            self.rebuild_indexes(
                f"last offset index entry (offset {int(oi.offsets[-1])}, "
                f"position {start}) does not point at a batch holding it"
            )
            self._derive_tail()
            return
        if len(w.scan):
            self._next_offset = int(w.scan.last_offset[-1]) + 1
        else:
            self._next_offset = int(oi.offsets[-1]) + 1 if len(oi) else self.base_offset
        scanned = int(w.scan.max_timestamp.max()) if len(w.scan) else -1
        self._max_timestamp = max(scanned, int(ti.last_entry[0]) if len(ti) else -1)

    # -- indexes ----------------------------------------------------------------------
    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._load_indexes()
        return self._offset_index  # type: ignore[return-value]

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        return self._time_index  # type: ignore[return-value]

    @property
    def txn_index(self) -> TransactionIndex | None:
        """Aborted transactions of this segment (``None`` without a ``.txnindex``)."""
        if self._txn_index is False:
            path = self.stem + TXN_INDEX_SUFFIX
            self._txn_index = (
                TransactionIndex.from_bytes(lakefs.read_all(self.fs, path), path=path)
                if lakefs.exists(self.fs, path)
                else None
            )
        return self._txn_index  # type: ignore[return-value]

    def _load_indexes(self) -> None:
        ipath, tpath = self.stem + INDEX_SUFFIX, self.stem + TIME_INDEX_SUFFIX
        try:
            oi = OffsetIndex.from_bytes(self._read_file(INDEX_SUFFIX), self.base_offset, path=ipath)
            ti = TimeIndex.from_bytes(
                self._read_file(TIME_INDEX_SUFFIX), self.base_offset, path=tpath
            )
            oi.sanity_check()
            ti.sanity_check()
            if len(oi) and int(oi.positions[-1]) >= self.size:
                raise CorruptIndexError(
                    f"last entry's position {int(oi.positions[-1])} is "
                    f"past the end of the log ({self.size} bytes)",
                    path=ipath,
                )
        except (SegmentNotFoundError, CorruptRecordError) as exc:
            self.rebuild_indexes(str(exc))
            return
        self._offset_index, self._time_index = oi, ti
        self.index_source = "file"

    def rebuild_indexes(self, why: str) -> None:
        """Replace the in-memory indexes with ones rebuilt from a full scan of the log."""
        log.warning("%s: indexes rebuilt from a scan of the log: %s", self.log_path, why)
        self._offset_index, self._time_index = rebuild_indexes(
            self.scan(), self.base_offset, self.index_interval_bytes
        )
        self.index_source = f"rebuilt: {why}"

    # -- byte access ------------------------------------------------------------------
    def window(self, start: int, end: int, *, verify_crc: bool = True) -> Window:
        """One ranged read of ``[start, end)`` and the whole batches in it."""
        end = min(end, self.size)
        data = self._read_range(start, end - start) if end > start else b""
        return self._make_window(start, data, self._eof(start, end, data), verify_crc=verify_crc)

    def _eof(self, start: int, end: int, data: bytes) -> str | None:
        """Where ``data``, read for ``[start, end)``, ends: ``"file"`` (before ``end``:
        the file is shorter), ``"size"`` (at ``size``), else ``None`` (a cut read)."""
        if len(data) < end - start:
            return "file"
        return "size" if end >= self.size else None

    def _make_window(
        self, start: int, data: bytes, eof: str | None, *, verify_crc: bool = True
    ) -> Window:
        """The whole batches of ``data`` (file bytes from ``start``, ending at ``eof``,
        see :meth:`_eof`): damaged ones raise or are skipped, a torn tail ends them
        (module docstring)."""
        scan = scan_batches(data, verify_crc=verify_crc, skip_corrupt=self.on_corrupt == "skip")
        for b in scan.skipped:
            self._skip(b, start)
        if scan.error is not None:
            self._check_stop(scan, start, data, eof)
        return Window(start, data, scan)

    def _torn(self, at: int, rest: bytes, eof: str) -> bool:
        """Whether a batch at ``at`` running past the end (``rest`` its bytes) is a torn
        tail (module docstring)."""
        if not (len(rest) < HEADER_SIZE or rest[16] == MAGIC or not any(rest)):
            return False
        if self.committed:
            return eof == "file"
        oi = self._offset_index if self.index_source == "file" else None
        return self.may_tear and not (oi is not None and len(oi) and oi.positions[-1] > at)

    def _skip(self, b: SkippedBatch, start: int) -> None:
        """Note a skipped batch once: a log line and a :class:`CorruptBatchWarning`."""
        at = start + b.position
        if at in self.skipped:
            return
        self.skipped[at] = b._replace(position=at)
        line = "skipped a damaged batch: " + b.describe(self.log_path, start)
        log.warning("%s", line)
        warnings.warn(line, CorruptBatchWarning, stacklevel=2)

    def _check_stop(self, scan: BatchScan, start: int, data: bytes, eof: str | None) -> None:
        """The scan of ``data`` stopped early: a read cut short and a torn tail pass,
        anything else raises :class:`CorruptRecordError`."""
        at = start + scan.valid_bytes
        rest = data[scan.valid_bytes :]
        if scan.truncated:
            if eof is None:
                return  # the read ended inside a batch: the caller reads on
            if self._torn(at, rest, eof):
                return  # a torn tail: not written yet
        if start > 0 and self.index_source == "file":
            # read from an index position: the index may be wrong, not the log. A scan
            # from 0 raises if the log is damaged; else the caller sees the index
            # disagree and rebuilds it
            self.window(0, self.size)
            return
        head = BatchHeader.unpack_from(rest) if len(rest) >= HEADER_SIZE else None
        offsets = f" with offsets {head.base_offset}..{head.last_offset}" if head else ""
        after = f" (after offset {int(scan.last_offset[-1])})" if len(scan) else ""
        if scan.truncated:
            what = f"{scan.why} and is not a torn tail (magic {rest[16]})"
        else:
            what = f"{scan.why}; {self.size - at - (head.size if head else 0)} bytes follow"
            what += f" inside the size {self.size}" if head and at + head.size <= self.size else ""
        if self.on_corrupt == "skip":
            what += f"; cannot be skipped: its length is not plausible, bytes [{at}, "
            what += f"{self.size}) are unreadable"
        raise CorruptRecordError(f"batch{offsets}{after}: {what}", path=self.log_path, position=at)

    def scan(self) -> BatchScan:
        """Headers of every valid batch (one full read); stops at a corrupt tail."""
        return self.window(0, self.size).scan

    def _next_entry_position(self, offset: int) -> int:
        """Position of the first offset-index entry with offset > ``offset`` (or EOF)."""
        oi = self.offset_index
        i = int(np.searchsorted(oi.offsets, offset, side="right"))
        return int(oi.positions[i]) if i < len(oi) else self.size

    def _span(self, lo: int, hi: int) -> Window:
        """Whole batches covering offsets ``[lo, hi]``, read with at most two requests:
        ``[floor(lo), next_entry(hi))`` plus the header after it; the batch at
        ``next_entry(hi)`` is read whole only when ``hi`` lies in it."""
        oi = self.offset_index
        start = int(oi.lookup(lo)[1]) if lo > self.base_offset else 0
        end = self._next_entry_position(hi)
        w = self.window(start, end + HEADER_SIZE if end < self.size else end)
        if self.index_source == "file" and not self._window_agrees(w, start, end):
            self.rebuild_indexes(
                f"offset index entries around position {start} do not match the batches of the log"
            )
            return self._span(lo, hi)
        if end < self.size and (not len(w.scan) or int(w.scan.last_offset[-1]) < hi):
            w = self.with_batch_at(w, end)
        return w

    def with_batch_at(self, w: Window, end: int) -> Window:
        """``w`` (read up to file position ``end`` plus the batch header there) with that
        batch read whole too (one more ranged read), or ``w`` if its header is not in it."""
        start = w.start
        tail = w.data[end - start :]
        if len(tail) < HEADER_SIZE:
            return w
        size = int.from_bytes(tail[8:12], "big", signed=True) + LOG_OVERHEAD
        rest = self.window(end, end + size, verify_crc=False)
        eof = self._eof(end, min(end + size, self.size), rest.data)
        return self._make_window(start, w.data[: end - start] + rest.data, eof)

    def _window_agrees(self, w: Window, start: int, end: int) -> bool:
        """The index said batches start at ``start`` and ``end``: do they?"""
        if end - start > 0 and (not len(w.scan) or w.scan.valid_bytes < end - start):
            return False
        if start > 0:
            if not len(w.scan):
                return False
            entry = self.offset_index.lookup(int(w.scan.last_offset[0]))
            # the entry must point at this batch: a later batch would skip records
            if int(entry[1]) != start or int(entry[0]) < int(w.scan.base_offset[0]):
                return False
        return True

    def _floor_position(self, offset: int) -> int:
        """Offset index floor of ``offset`` as a position (0 at or below the base)."""
        return int(self.offset_index.lookup(offset)[1]) if offset > self.base_offset else 0

    def _bad_start(self, w: Window, start: int) -> bool:
        """A window read from an offset index position does not start where the index
        said a batch starts: rebuild the index (and the caller starts over)."""
        if start > 0 and self.index_source == "file" and not self._window_agrees(w, start, start):
            self.rebuild_indexes(
                f"offset index entry at position {start} does not point at the start of its batch"
            )
            return True
        return False

    # -- reads ------------------------------------------------------------------------
    def read_records(
        self,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        max_records: int | None = None,
        skip_control: bool = True,
    ) -> pa.Table:
        """Records with ``start_offset <= offset < end_offset`` (internal record schema),
        at most ``max_records`` of them."""
        lo = self.base_offset if start_offset is None else max(start_offset, self.base_offset)
        hi = (end_offset - 1) if end_offset is not None else None
        if max_records is not None and (hi is None or hi > lo + max_records - 1):
            hi = lo + max_records - 1  # offsets are unique: max_records records lie within
        if hi is None:
            start = self._floor_position(lo)
            w = self.window(start, self.size)
            if self._bad_start(w, start):
                return self.read_records(
                    start_offset, end_offset, max_records=max_records, skip_control=skip_control
                )
        else:
            if hi < lo:
                return decode_batches(b"", BatchScan.empty())
            w = self._span(lo, hi)
        keep = w.scan.last_offset >= lo
        if hi is not None:
            keep &= w.scan.base_offset <= hi
        table = w.decode(keep, skip_control=skip_control, path=self.log_path)
        off = table.column("offset")
        mask = pc.greater_equal(off, lo)
        if hi is not None:
            mask = pc.and_(mask, pc.less_equal(off, hi))
        return table.filter(mask)

    def read(
        self,
        start_offset: int,
        max_size: int,
        *,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> Window:
        """Kafka's ``LogSegment.read``: whole batches from the one holding ``start_offset``,
        at most ``max_size`` bytes (with ``min_one_message`` the first batch even if it is
        larger), not starting at or past ``max_position``."""
        limit = self.size if max_position is None else min(max_position, self.size)
        w = self._span(start_offset, start_offset)
        hits = np.nonzero(w.scan.last_offset >= start_offset)[0]
        if not len(hits):
            return Window(limit, b"", BatchScan.empty())
        first = int(w.positions[hits[0]])
        first_size = int(w.scan.size[hits[0]])
        budget = max(max_size, first_size) if min_one_message else max_size
        if first >= limit or budget < first_size:
            return Window(first, b"", BatchScan.empty())
        return self.window(first, min(limit, first + budget))

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int | None = None
    ) -> TimestampOffset | None:
        """First record (offset >= ``start_offset``) with timestamp >= ``timestamp``, or
        ``None``. Exact under non-monotonic CreateTime (strict time-index floor)."""
        lo = self.base_offset if start_offset is None else max(start_offset, self.base_offset)
        ts_entry, off_entry = self.time_index.lookup_strict(timestamp)
        from_offset = max(int(off_entry) if ts_entry >= 0 else self.base_offset, lo)
        pos = first = self._floor_position(from_offset)
        oi_positions = self.offset_index.positions
        while pos < self.size:
            # one index interval at a time: up to the next index entry after pos
            i = int(np.searchsorted(oi_positions, pos, side="right"))
            end = int(oi_positions[i]) if i < len(oi_positions) else self.size
            w = self.window(pos, end)
            if w.end == pos:
                # a batch larger than the chunk (or a torn tail): read it whole
                head = self.window(pos, pos + HEADER_SIZE, verify_crc=False).data
                if len(head) == HEADER_SIZE:
                    w = self.window(
                        pos, pos + int.from_bytes(head[8:12], "big", signed=True) + LOG_OVERHEAD
                    )
            if pos == first and self._bad_start(w, first):
                return self.find_offset_by_timestamp(timestamp, start_offset)
            if w.end == pos:
                return None  # a torn tail
            # control batches hold no records to return (their markers are skipped)
            hits = np.nonzero(
                (w.scan.max_timestamp >= timestamp)
                & (w.scan.last_offset >= lo)
                & ~w.scan.is_control
            )[0]
            for b in hits:
                # offsets and timestamps only (each batch checked whole, as decode does)
                offs, ts = w.record_times(slice(int(b), int(b) + 1), path=self.log_path)
                ok = np.nonzero((ts >= timestamp) & (offs >= lo))[0]
                if len(ok):
                    return TimestampOffset(int(ts[ok[0]]), int(offs[ok[0]]))
            pos = w.end
        return None
