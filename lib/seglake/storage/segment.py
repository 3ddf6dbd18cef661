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

Damaged bytes are never read as "not written yet" (a torn tail is told from corruption,
which raises or is skipped): :mod:`seglake.storage.segment_window`. Where the files are
(staged, final or retired copies) and whether they are the catalog row's:
:class:`~seglake.storage.segment_files.SegmentFiles`, which the segment owns.

Record reads:

    read_records(lo, end):  the whole batches covering [lo, end - 1] (``_span``: offset
                            index floor(lo) .. first entry past end - 1), decoded, then
                            records filtered to lo <= offset < end
    read(o, max_size):      whole batches from the one holding o, at most max_size bytes
    find_offset_by_timestamp(t):
                            time index bounds_many(t)'s first (one past the strict
                            floor's offset, as every reader) -> position; one index
                            interval at a time to the first batch with maxTimestamp >= t;
                            its first record with ts >= t (offsets and timestamps only)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from seglake import fs as lakefs
from seglake.errors import (
    CorruptIndexError,
    CorruptRecordError,
    SegmentNotFoundError,
    SegmentReplacedError,
)
from seglake.record.batch import (
    HEADER_SIZE,
    BatchScan,
    SkippedBatch,
    claimed_size,
)
from seglake.record.reader import decode_batches, record_times
from seglake.storage.index_builder import DEFAULT_INTERVAL, prefix_indexes, rebuild_indexes
from seglake.storage.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.segment_files import Pin, SegmentFiles
from seglake.storage.segment_window import (
    Window,
    check_on_corrupt,
    data_end,
    eof_of,
    make_window,
)
from seglake.storage.time_index import TimeIndex, TimestampOffset
from seglake.storage.txn_index import TransactionIndex

if TYPE_CHECKING:
    from seglake.storage.key_index import KeyIndex

__all__ = ["DEFAULT_INTERVAL", "LogSegment", "TimestampOffset"]

log = logging.getLogger(__name__)


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
        committed: ``size`` is a lake's committed size: a file shorter is data loss
            (:mod:`~seglake.storage.segment_window`: cut short).
        may_tear: a broker segment that may end in a torn tail (the partition's last).
        on_corrupt: ``"raise"`` (default) or ``"skip"`` damaged batches (module doc).
        retired_path: where this segment's files went if a later run (compaction, merge)
            published other files under the same name; read instead of ``log_path``
            whenever it exists.
        exact_size: a later catalog version replaced or removed this (committed) row: the
            ``.log`` read must be exactly ``size`` bytes, else it is the replacing
            segment's (one size request at the first file access; no torn tail then).

    With ``staged_path`` or ``retired_path``, the first file access checks where the
    files are (at most two existence checks per segment): the retired copy, else the
    staged copy, else ``log_path``. The staged copy wins over ``log_path`` because a
    replacing run's row is committed before the old file under the same name is retired.
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
        retired_path: str | None = None,
        exact_size: bool = False,
    ) -> None:
        parsed = parse_segment_file_name(log_path.rsplit("/", 1)[-1])
        if parsed is None or parsed[1] != LOG_SUFFIX:
            raise SegmentNotFoundError(
                f"{log_path}: not a segment .log file name (20-digit base offset + .log)"
            )
        self.fs = fs
        self.base_offset = parsed[0]
        self.files = SegmentFiles(
            fs,
            log_path,
            parsed[0],
            row_size=size,
            row_next_offset=next_offset,
            staged_path=staged_path,
            retired_path=retired_path,
            exact_size=exact_size,
        )
        self._size = size
        self._next_offset = next_offset
        self._max_timestamp = max_timestamp
        self.index_interval_bytes = index_interval_bytes
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | bool | None = False
        # its checked .keyindex once a key lookup kept it, or why it has no usable one
        # (as of that lookup); None: not looked at (storage/key_lookup.keep_key_index)
        self.key_index: KeyIndex | str | None = None
        self.index_source = "unread"
        self.committed, self.may_tear = committed, may_tear
        self._end_checked = False  # a zero tail looked for (``size``)
        self.on_corrupt = check_on_corrupt(on_corrupt)
        self.skipped: dict[int, SkippedBatch] = {}  # file position -> batch skipped

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path!r}, base_offset={self.base_offset})"

    # -- files --------------------------------------------------------------------------
    @property
    def log_path(self) -> str:
        """Path of the ``.log`` in use (the final, staged or retired copy)."""
        return self.files.log_path

    @property
    def stem(self) -> str:
        """:attr:`log_path` without ``.log``: the stem of the segment's files."""
        return self.files.stem

    @property
    def pin(self) -> Pin | None:
        """The catalog version the segment's reader is pinned to (:class:`Pin`)."""
        return self.files.pin

    @pin.setter
    def pin(self, pin: Pin | None) -> None:
        self.files.pin = pin

    def log_bytes(self) -> bytes:
        """The whole ``.log``."""
        return self.files.read_range(0, self.size)

    # -- sizes and bounds -------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of the ``.log``; of a broker's active segment (``may_tear``, not a lake
        row), up to where zeros fill the rest of its file (a preallocated segment:
        :func:`~seglake.storage.segment_window.data_end`, checked at the first use)."""
        if self._size is None:
            self._size = self.files.log_size()
        if not self._end_checked:
            self._end_checked = True
            if self.may_tear and not self.committed:
                self._size = data_end(self.files, self._size)
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
            self.files.locate()
            path = self.stem + TXN_INDEX_SUFFIX
            try:  # one request (a read that finds no file), not an existence check first
                data = lakefs.read_all(self.fs, path)
            except SegmentNotFoundError:
                self._txn_index = None
            else:
                self._txn_index = TransactionIndex.from_bytes(data, path=path)
        return self._txn_index  # type: ignore[return-value]

    def _load_indexes(self) -> None:
        ipath, tpath = self.stem + INDEX_SUFFIX, self.stem + TIME_INDEX_SUFFIX
        try:
            read, size = self.files.read_index, self.size  # never past the entries in use
            data, length = read(INDEX_SUFFIX, OffsetIndex.read_limit(size))
            oi = OffsetIndex.from_bytes(data, self.base_offset, path=ipath, length=length)
            data, length = read(TIME_INDEX_SUFFIX, TimeIndex.read_limit(size))
            ti = TimeIndex.from_bytes(data, self.base_offset, path=tpath, length=length)
            oi.sanity_check()
            ti.sanity_check()
            nxt = self._next_offset
            grown = prefix_indexes(oi, ti, self.size, nxt) if self.committed and nxt else None
            if grown is not None:  # appended to in place since this row's version
                oi, ti = grown
            elif len(oi) and int(oi.positions[-1]) >= self.size:
                raise CorruptIndexError(
                    f"last entry's position {int(oi.positions[-1])} is "
                    f"past the end of the log ({self.size} bytes)",
                    path=ipath,
                )
        except SegmentReplacedError:
            raise
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

    # -- record reads ---------------------------------------------------------------
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
            start = self.floor_position(lo)
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
        # where the answer can start: TimeIndex.bounds_many's ``first`` (one past the
        # strict floor entry's offset), the one rule every timestamp read uses
        first_possible, last = (int(b[0]) for b in self.time_index.bounds_many([timestamp]))
        from_offset = max(first_possible, lo)
        pos = first = self.floor_position(from_offset)
        oi = self.offset_index
        # the answer is at the latest in the batch holding ``last`` (the time index's next
        # entry): its bytes are read at once (one request on an object store where an
        # interval at a time took two; COALESCE_GAP_BYTES at most, so a sparse index's long
        # interval is never held twice), then checked an interval at a time as before (a
        # damaged batch past the answer is never looked at)
        ahead = b""
        if last >= from_offset:
            stop = min(self.upper_position(last), pos + lakefs.COALESCE_GAP_BYTES)
            if stop > oi.next_position(pos, self.size):
                ahead = self.files.read_range(pos, stop - pos)
        while pos < self.size:
            # one index interval at a time: up to the next index entry after pos
            end = oi.next_position(pos, self.size)
            w = self.window(pos, end, ahead=(first, ahead))
            if w.end == pos:
                # a batch larger than the chunk (or a torn tail): read it whole
                head = self.window(pos, pos + HEADER_SIZE, verify_crc=False).data
                if len(head) == HEADER_SIZE:
                    w = self.window(pos, pos + claimed_size(head))
            if pos == first and self._bad_start(w, first):
                return self.find_offset_by_timestamp(timestamp, start_offset)
            if w.end == pos:
                return None  # a torn tail
            # control batches too: Kafka's FileRecords.searchForTimestamp walks every
            # batch, so a transaction marker (stamped with the broker's clock) can be the
            # answer, as ListOffsets gives it
            hits = np.nonzero((w.scan.max_timestamp >= timestamp) & (w.scan.last_offset >= lo))[0]
            for b in hits:
                # offsets and timestamps only (each batch checked whole, as decode does)
                one = w.scan.take(slice(int(b), int(b) + 1))
                offs, ts = record_times(w.data, one, path=self.log_path, skip_control=False)
                ok = np.nonzero((ts >= timestamp) & (offs >= lo))[0]
                if len(ok):
                    return TimestampOffset(int(ts[ok[0]]), int(offs[ok[0]]))
            pos = w.end
        return None

    # -- byte access ------------------------------------------------------------------
    def window(
        self,
        start: int,
        end: int,
        *,
        verify_crc: bool = True,
        ahead: tuple[int, bytes] = (0, b""),
    ) -> Window:
        """One ranged read of ``[start, end)`` and the whole batches in it; ``ahead``:
        ``(position, bytes)`` read before, used instead where they hold the range."""
        end = min(end, self.size)
        at, pre = ahead
        if at <= start and end <= at + len(pre):
            data = pre[start - at : end - at]
        else:
            data = self.files.read_range(start, end - start) if end > start else b""
        eof = eof_of(start, end, data, self.size)
        return make_window(self, start, data, eof, verify_crc=verify_crc)

    def scan(self) -> BatchScan:
        """Headers of every valid batch (one full read); stops at a corrupt tail."""
        return self.window(0, self.size).scan

    def floor_position(self, offset: int) -> int:
        """Where a read of ``offset`` starts: the offset index floor's position; 0 at or
        below the base offset (no index opened)."""
        return int(self.offset_index.lookup(offset)[1]) if offset > self.base_offset else 0

    def floor_positions(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`floor_position` of many offsets: ``(floor offsets, positions)``."""
        offsets = np.asarray(offsets, dtype=np.int64)
        if not (offsets > self.base_offset).any():
            zeros = np.zeros(offsets.shape, dtype=np.int64)
            return zeros + self.base_offset, zeros
        floor, start = self.offset_index.lookup_many(offsets)
        return floor, np.where(offsets > self.base_offset, start, 0)

    def upper_position(self, offset: int) -> int:
        """Where a read that must cover ``offset`` may stop: the position of the first
        offset index entry above it, or the segment's size."""
        return self.offset_index.upper_position(offset, self.size)

    def upper_positions(self, offsets: np.ndarray, *, beyond: int = 0) -> np.ndarray:
        """:meth:`upper_position` of many offsets (int64), or ``beyond`` entries further."""
        return self.offset_index.upper_positions(offsets, self.size, beyond)

    def _span(self, lo: int, hi: int) -> Window:
        """Whole batches covering offsets ``[lo, hi]``, read with at most two requests:
        ``[floor(lo), next_entry(hi))`` plus the header after it; the batch at
        ``next_entry(hi)`` is read whole only when ``hi`` lies in it."""
        start = self.floor_position(lo)
        end = self.upper_position(hi)
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
        size = claimed_size(tail)
        rest = self.window(end, end + size, verify_crc=False)
        eof = eof_of(end, min(end + size, self.size), rest.data, self.size)
        return make_window(self, start, w.data[: end - start] + rest.data, eof)

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

    def _bad_start(self, w: Window, start: int) -> bool:
        """A window read from an offset index position does not start where the index
        said a batch starts: rebuild the index (and the caller starts over)."""
        if start > 0 and self.index_source == "file" and not self._window_agrees(w, start, start):
            self.rebuild_indexes(
                f"offset index entry at position {start} does not point at the start of its batch"
            )
            return True
        return False
