"""Windows of a ``.log`` (:class:`Window`: bytes read from a file position and the
whole batches in them) and how a :class:`~seglake.storage.segment.LogSegment`'s bytes
become one (:func:`make_window`). Damaged bytes are never read as "not written yet":

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
    zero tail   a broker's active segment preallocated (``preallocate=true``) and not
                trimmed: zeros after its last batch. As in Kafka's recovery, the log ends
                at the first batch position from which the file holds only zeros
                (:func:`data_end`: found in windows, the zeros never read whole)
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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from seglake import fs as lakefs
from seglake.errors import (
    ConfigError,
    CorruptBatchWarning,
    CorruptRecordError,
    TruncatedSegmentError,
)
from seglake.record.batch import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    BatchScan,
    SkippedBatch,
    claimed_size,
    scan_batches,
)
from seglake.record.reader import decode_batches

if TYPE_CHECKING:
    from seglake.storage.segment import LogSegment
    from seglake.storage.segment_files import SegmentFiles

__all__ = ["ON_CORRUPT", "Window", "check_on_corrupt", "data_end", "eof_of", "make_window"]

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


def eof_of(start: int, end: int, data: bytes, size: int) -> str | None:
    """Where ``data``, read for ``[start, end)`` of a ``.log`` of ``size`` bytes, ends:
    ``"file"`` (before ``end``: the file is shorter), ``"size"`` (at ``size``), else
    ``None`` (a cut read)."""
    if len(data) < end - start:
        return "file"
    return "size" if end >= size else None


def data_end(files: SegmentFiles, size: int) -> int:
    """Where the batches of a broker ``.log`` of ``size`` bytes end if only zeros follow
    them (module docstring: zero tail), else ``size``. Cheap unless the file ends in
    zeros: one read of its last 8 bytes; then the batch chain is followed from 0 in
    windows of :data:`~seglake.fs.WINDOW_BYTES` (a batch larger than one hopped over by
    its header) and the rest checked for zeros (:func:`~seglake.fs.all_zeros`). Anything
    else that stops the chain is left to the reads (torn tail or corruption)."""
    if size < HEADER_SIZE or any(files.read_range(size - 8, 8)):
        return size
    pos = 0
    while pos < size:
        data = files.read_range(pos, min(lakefs.WINDOW_BYTES, size - pos))
        if not data:
            return size  # the file is shorter than ``size``: the reads name it
        scan = scan_batches(data, verify_crc=False)
        pos += scan.valid_bytes
        head = data[scan.valid_bytes : scan.valid_bytes + HEADER_SIZE]
        if pos >= size or (scan.error is None and len(data) == scan.valid_bytes):
            continue
        if len(head) == HEADER_SIZE and not any(head):
            break  # zeros where a batch would start
        if len(head) < HEADER_SIZE and scan.valid_bytes:
            continue  # the window ended inside a header: read on from it
        n = claimed_size(head) if len(head) == HEADER_SIZE else 0
        if not (scan.truncated and n >= HEADER_SIZE and pos + n <= size):
            return size  # not zeros: the reads name it
        pos += n  # a batch larger than the rest of the window
    if pos < size and lakefs.all_zeros(files.fs, files.log_path, pos, size):
        return pos
    return size


def make_window(
    seg: LogSegment, start: int, data: bytes, eof: str | None, *, verify_crc: bool = True
) -> Window:
    """The whole batches of ``data`` (``seg``'s bytes from ``start``, ending at ``eof``,
    see :func:`eof_of`): damaged ones raise or are skipped, a torn tail ends them
    (module docstring)."""
    scan = scan_batches(data, verify_crc=verify_crc, skip_corrupt=seg.on_corrupt == "skip")
    for b in scan.skipped:
        _skip(seg, b, start)
    files = seg.files
    nxt = files.row_next_offset if seg.committed else None
    if nxt is not None and len(scan) and int(scan.last_offset[-1]) >= nxt:
        files.gone(
            files.not_row_file(
                f"it holds offsets up to {int(scan.last_offset[-1])} at position "
                f"{start + int(scan.position[-1])}"
            )
        )
    if eof == "file" and seg.committed:
        _cut_short(seg)
    if scan.error is not None:
        _check_stop(seg, scan, start, data, eof)
    return Window(start, data, scan)


def _cut_short(seg: LogSegment) -> None:
    """The ``.log`` ends before its row's ``size_bytes`` (module docstring: cut short):
    the pin's error for a row a later version replaced in place, else a
    :class:`TruncatedSegmentError` (skip mode: noted once, the read goes on)."""
    files = seg.files
    if files.pin is not None:
        err = files.pin.short(files)
        if err is not None:
            raise err
    lost = files.lost_tail(seg.size)
    if lost is None:
        return  # the file still ends with the row's last offset (below)
    if seg.on_corrupt != "skip":
        raise TruncatedSegmentError(lost.why, path=seg.log_path, position=lost.position)
    _skip(seg, lost, 0)


def _torn(seg: LogSegment, at: int, rest: bytes, eof: str) -> bool:
    """Whether a batch at ``at`` running past the end (``rest`` its bytes) is a torn
    tail (module docstring); in a lake, the end of a file cut short (reported by
    :func:`_cut_short` first, read on only when skipping)."""
    if not (len(rest) < HEADER_SIZE or rest[16] == MAGIC or not any(rest)):
        return False
    if seg.committed:
        return eof == "file"
    oi = seg.offset_index if seg.index_source == "file" else None
    return seg.may_tear and not (oi is not None and len(oi) and oi.positions[-1] > at)


def _skip(seg: LogSegment, b: SkippedBatch, start: int) -> None:
    """Note a skipped batch once: in ``seg.skipped`` and one :class:`CorruptBatchWarning`
    (no log line besides: each reader reports ``skipped`` its own way, one line a
    batch: the CLI on stderr, the Spark jobs' summary, the data source's task log)."""
    at = start + b.position
    if at in seg.skipped:
        return
    seg.skipped[at] = b._replace(position=at)
    line = "skipped a damaged batch: " + b.describe(seg.log_path, start)
    warnings.warn(line, CorruptBatchWarning, stacklevel=2)


def _check_stop(seg: LogSegment, scan: BatchScan, start: int, data: bytes, eof: str | None) -> None:
    """The scan of ``data`` stopped early: a read cut short and a torn tail pass,
    anything else raises :class:`CorruptRecordError`."""
    at = start + scan.valid_bytes
    rest = data[scan.valid_bytes :]
    if scan.truncated:
        if eof is None:
            return  # the read ended inside a batch: the caller reads on
        if _torn(seg, at, rest, eof):
            return  # a torn tail: not written yet
    if start > 0 and seg.index_source == "file":
        # read from an index position: the index may be wrong, not the log. A scan
        # from 0 raises if the log is damaged; else the caller sees the index
        # disagree and rebuilds it
        seg.window(0, seg.size)
        return
    size = seg.size
    head = BatchHeader.unpack_from(rest) if len(rest) >= HEADER_SIZE else None
    offsets = f" with offsets {head.base_offset}..{head.last_offset}" if head else ""
    after = f" (after offset {int(scan.last_offset[-1])})" if len(scan) else ""
    batch_bytes = head.size if head is not None and HEADER_SIZE <= head.size <= size - at else 0
    if seg.committed and eof == "size" and scan.truncated and seg.files.longer(size):
        seg.files.gone(seg.files.not_row_file(f"a batch at position {at} runs past the size"))
    if scan.truncated:
        what = f"{scan.why}, not a torn tail"
        what += f" (magic {rest[16]})" if head else " (a segment that is not the last)"
    else:
        what = f"{scan.why}; {size - at - batch_bytes} bytes follow"
        what += f" inside the size {size}" if batch_bytes else ""
    if seg.on_corrupt == "skip":
        what += f"; cannot be skipped: its length is not plausible, bytes [{at}, "
        what += f"{size}) are unreadable"
    raise CorruptRecordError(f"batch{offsets}{after}: {what}", path=seg.log_path, position=at)
