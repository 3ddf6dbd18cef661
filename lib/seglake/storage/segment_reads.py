"""A segment's record reads (:class:`SegmentReads`, mixed into
:class:`~seglake.storage.segment.LogSegment`): by offsets, Kafka's ``LogSegment.read``,
and by timestamp.

    read_records(lo, end):  the whole batches covering [lo, end - 1] (``_span``: offset
                            index floor(lo) .. first entry past end - 1), decoded, then
                            records filtered to lo <= offset < end
    read(o, max_size):      whole batches from the one holding o, at most max_size bytes
    find_offset_by_timestamp(t):
                            time index strict floor(t) -> offset -> position; one index
                            interval at a time to the first batch with maxTimestamp >= t;
                            its first record with ts >= t (offsets and timestamps only)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.record.batch import HEADER_SIZE, BatchScan, claimed_size
from seglake.record.reader import decode_batches, record_times
from seglake.storage.segment_window import Window
from seglake.storage.time_index import TimestampOffset

if TYPE_CHECKING:
    from seglake.storage.offset_index import OffsetIndex
    from seglake.storage.time_index import TimeIndex

__all__ = ["SegmentReads", "TimestampOffset"]


class SegmentReads:
    """Record reads of a segment (needs ``base_offset``, ``log_path``, ``size``, the
    indexes, ``window``, ``_span``, ``floor_position`` and ``_bad_start``)."""

    base_offset: int
    log_path: str

    if TYPE_CHECKING:

        @property
        def size(self) -> int: ...

        @property
        def offset_index(self) -> OffsetIndex: ...

        @property
        def time_index(self) -> TimeIndex: ...

        def window(self, start: int, end: int, *, verify_crc: bool = True) -> Window: ...

        def _span(self, lo: int, hi: int) -> Window: ...

        def floor_position(self, offset: int) -> int: ...

        def _bad_start(self, w: Window, start: int) -> bool: ...

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
        ts_entry, off_entry = self.time_index.lookup_strict(timestamp)
        from_offset = max(int(off_entry) if ts_entry >= 0 else self.base_offset, lo)
        pos = first = self.floor_position(from_offset)
        oi = self.offset_index
        while pos < self.size:
            # one index interval at a time: up to the next index entry after pos
            end = oi.next_position(pos, self.size)
            w = self.window(pos, end)
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
