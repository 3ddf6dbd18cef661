"""Windows of a ``.log`` (:class:`Window`: bytes read from a file position and the
whole batches in them) and how :class:`~seglake.storage.segment.LogSegment` makes them
(:class:`WindowReads`). Damaged bytes are never read as "not written yet"
(:meth:`WindowReads._make_window`):

    torn tail   in a broker directory only: the last batch runs past the end of the
                file (its header has magic 2), or a partial header, or zeros to the
                end, the segment is the partition's last (``may_tear``) and no offset
                index entry lies past it. The records before it are the segment's
                records (Kafka's recovery cuts there)
    cut short   in a lake (``committed``): the file ends before its catalog row's
                ``size_bytes``. A row a later catalog version replaced in place is the
                reader's pin's :class:`VersionSupersededError`; a current row's
                committed records are gone: :class:`TruncatedSegmentError` naming the
                file, both sizes and the lost offsets (``on_corrupt="skip"``: reported
                once as a skipped range, the whole batches before the cut read)
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
import warnings
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import pyarrow as pa

from seglake.errors import (
    ConfigError,
    CorruptBatchWarning,
    CorruptRecordError,
    SegmentNotFoundError,
    SegmentReplacedError,
    TruncatedSegmentError,
)
from seglake.record.batch import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    BatchScan,
    SkippedBatch,
    scan_batches,
)
from seglake.record.reader import decode_batches

if TYPE_CHECKING:
    from seglake.storage.offset_index import OffsetIndex
    from seglake.storage.segment_files import Pin

ON_CORRUPT = ("raise", "skip")  # what a read does at a damaged batch


def check_on_corrupt(value: str) -> str:
    """``value`` if it is one of :data:`ON_CORRUPT`, else :class:`ConfigError`."""
    if value not in ON_CORRUPT:
        raise ConfigError(f"on_corrupt {value!r}: expected one of {', '.join(ON_CORRUPT)}")
    return value


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
        headers: bool = True,
    ) -> pa.Table:
        """The records of the batches ``sel`` (all: None), by the one record reader
        (:func:`~seglake.record.reader.decode_batches`)."""
        scan = self.scan if sel is None else self.scan.take(sel)
        return decode_batches(
            self.data, scan, skip_control=skip_control, path=path, headers=headers
        )


class WindowReads:
    """:class:`~seglake.storage.segment.LogSegment`'s making of windows: it provides
    ``size``, ``log_path``, ``committed``, ``may_tear``, ``on_corrupt``, ``skipped``,
    ``index_source``, ``_offset_index`` and ``window``."""

    log_path: str
    base_offset: int
    committed: bool
    _next_offset: int | None
    may_tear: bool
    on_corrupt: str
    skipped: dict[int, SkippedBatch]
    index_source: str
    _offset_index: OffsetIndex | None
    pin: Pin | None
    _lost_tail: SkippedBatch | None = None  # a .log cut short: what it lost (found once)
    _cut_checked = False

    if TYPE_CHECKING:

        @property
        def size(self) -> int: ...

        def window(self, start: int, end: int, *, verify_crc: bool = True) -> Window: ...

        def longer(self) -> bool: ...

        def _file_size(self) -> int: ...

        def _read_range(self, start: int, length: int) -> bytes: ...

        def gone(self, exc: SegmentNotFoundError) -> NoReturn: ...

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
        nxt = self._next_offset if self.committed else None
        if nxt is not None and len(scan) and int(scan.last_offset[-1]) >= nxt:
            self.gone(
                self.not_row_file(
                    f"it holds offsets up to {int(scan.last_offset[-1])} at position "
                    f"{start + int(scan.position[-1])}"
                )
            )
        if eof == "file" and self.committed:
            self._cut_short()
        if scan.error is not None:
            self._check_stop(scan, start, data, eof)
        return Window(start, data, scan)

    def _cut_short(self) -> None:
        """The ``.log`` ends before its row's ``size_bytes`` (module docstring: cut
        short): the pin's error for a row a later version replaced in place, else a
        :class:`TruncatedSegmentError` (skip mode: noted once, the read goes on)."""
        if self.pin is not None:
            err = self.pin.short(self)  # type: ignore[arg-type]
            if err is not None:
                raise err
        if not self._cut_checked:
            self._lost_tail, self._cut_checked = self._find_lost_tail(), True
        lost = self._lost_tail
        if lost is None:
            return  # the file still ends with the row's last offset (below)
        if self.on_corrupt != "skip":
            raise TruncatedSegmentError(lost.why, path=self.log_path, position=lost.position)
        self._skip(lost, 0)

    def _find_lost_tail(self) -> SkippedBatch | None:
        """What a ``.log`` cut short lost: from the end of its last whole batch to the
        row's ``size_bytes`` and ``next_offset`` (one read of the file: error path only).
        ``None`` when its batches still reach the row's last offset: bytes went from its
        middle, not its end (a recovery's rewrite without a damaged batch, before its
        commit: the damaged batch's offsets are the gap recovery reports)."""
        length = self._file_size()
        scan = scan_batches(self._read_range(0, length), skip_corrupt=True)
        first = int(scan.last_offset[-1]) + 1 if len(scan) else self.base_offset
        nxt = self._next_offset
        if nxt is not None and first >= nxt:
            return None
        last = first - 1 if nxt is None else int(nxt) - 1
        gone = f"offsets {first}..{last}" if nxt is not None else f"offsets from {first}"
        why = (
            f"cut short: the file has {length} bytes, its catalog row {self.size} "
            f"(size_bytes); {gone} are gone (data loss; `seglake recover` commits what is "
            "left)"
        )
        return SkippedBatch(scan.valid_bytes, self.size - scan.valid_bytes, first, last, why)

    def not_row_file(self, why: str) -> SegmentReplacedError:
        """The file at ``log_path`` is not the one its catalog row describes (a later run
        published another segment under its name; the row's own copy is gone). Checked
        at no cost on every lake window (an offset at or past the row's ``next_offset``;
        a batch running past ``size_bytes`` in a longer file), and for rows a later
        catalog version replaced (``exact_size``) once per open: the file's length."""
        return SegmentReplacedError(
            f"{self.log_path}: not the file of its catalog row (size_bytes {self.size}, "
            f"next_offset {self._next_offset}): {why}; a later catalog version replaced "
            "it under the same name"
        )

    def _torn(self, at: int, rest: bytes, eof: str) -> bool:
        """Whether a batch at ``at`` running past the end (``rest`` its bytes) is a torn
        tail (module docstring); in a lake, the end of a file cut short (reported by
        :meth:`_cut_short` first, read on only when skipping)."""
        if not (len(rest) < HEADER_SIZE or rest[16] == MAGIC or not any(rest)):
            return False
        if self.committed:
            return eof == "file"
        oi = self._offset_index if self.index_source == "file" else None
        return self.may_tear and not (oi is not None and len(oi) and oi.positions[-1] > at)

    def _skip(self, b: SkippedBatch, start: int) -> None:
        """Note a skipped batch once: in ``skipped`` and one :class:`CorruptBatchWarning`
        (no log line besides: each reader reports ``skipped`` its own way, one line a
        batch: the CLI on stderr, the Spark jobs' summary, the data source's task log)."""
        at = start + b.position
        if at in self.skipped:
            return
        self.skipped[at] = b._replace(position=at)
        line = "skipped a damaged batch: " + b.describe(self.log_path, start)
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
        batch_bytes = (
            head.size if head is not None and HEADER_SIZE <= head.size <= self.size - at else 0
        )
        if self.committed and eof == "size" and scan.truncated and self.longer():
            self.gone(self.not_row_file(f"a batch at position {at} runs past the size"))
        if scan.truncated:
            what = f"{scan.why}, not a torn tail"
            what += f" (magic {rest[16]})" if head else " (a segment that is not the last)"
        else:
            what = f"{scan.why}; {self.size - at - batch_bytes} bytes follow"
            what += f" inside the size {self.size}" if batch_bytes else ""
        if self.on_corrupt == "skip":
            what += f"; cannot be skipped: its length is not plausible, bytes [{at}, "
            what += f"{self.size}) are unreadable"
        raise CorruptRecordError(f"batch{offsets}{after}: {what}", path=self.log_path, position=at)
