"""RecordBatch v2 header and the batch-level scan of a ``.log`` buffer.

Header, 61 bytes, big-endian::

    off size field                  off size field
      0    8 baseOffset              27    8 baseTimestamp
      8    4 batchLength (size - 12) 35    8 maxTimestamp
     12    4 partitionLeaderEpoch    43    8 producerId
     16    1 magic (2)               51    2 producerEpoch
     17    4 crc (CRC-32C of [21, end))  53    4 baseSequence
     21    2 attributes              57    4 recordsCount
     23    4 lastOffsetDelta         61    .. records

attributes: bits 0-2 codec, bit 3 timestampType (1 LogAppendTime), bit 4 transactional,
bit 5 control, bit 6 hasDeleteHorizonMs.

:func:`scan_batches` walks batch headers (never records) and stops, without raising, at
the first batch that is truncated or invalid: ``valid_bytes`` is where recovery must
cut, as Kafka's ``LogSegment.recover`` does. It tells the two apart (``truncated``):

    truncated  fewer than 61 bytes left, or the batch runs past ``end``: a torn tail if
               ``end`` is where the file ends (``LogSegment`` decides), else a cut read
    corrupt    batchLength below 49, magic != 2, negative counts, CRC mismatch, or offsets
               not above the previous batch's: bytes that are there and wrong

With ``skip_corrupt`` a corrupt batch whose length is plausible (it ends at ``end`` or
where the next header has magic 2 and a valid length) is set aside (``skipped``) and
the scan goes on; one whose length is garbage still stops it.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, NamedTuple, cast

import numpy as np

from seglake.format import INT32_MAX, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD
from seglake.record import native
from seglake.record.crc import crc32c, crc32c_ranges

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = RECORD_BATCH_OVERHEAD  # 61
assert HEADER.size == HEADER_SIZE
LENGTH_OFFSET = 8
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAGIC = 2
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
NO_PRODUCER_ID = -1
# below these, the compiled kernel's fixed cost (~30 us) is more than the Python scan's
NATIVE_SCAN_BYTES = 1 << 16
NATIVE_SCAN_BATCHES = 8

HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: producer sequences wrap from
    int32 max to 0 (a record's is its batch's baseSequence + its offset delta)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence`` (the inverse wrap)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def move_base_offsets(
    data: np.ndarray, positions: np.ndarray, base_offsets: np.ndarray, delta: int
) -> None:
    """Add ``delta`` to the baseOffset (bytes ``[0, 8)``, int64 big-endian) of the batches
    at ``positions`` of ``data`` (writable uint8, e.g. a file's map), in place;
    ``base_offsets``: theirs before. The CRC-32C covers ``attributes`` to the end, so the
    batches move without re-encoding or a new CRC (Kafka's ``setLastOffset`` family)."""
    at = (np.asarray(positions, np.int64)[:, None] + np.arange(8)).ravel()
    moved = np.asarray(base_offsets, np.int64) + delta
    data[at] = moved.astype(">i8").view(np.uint8)


def batch_crcs(data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The CRC-32C of every batch at ``position`` (``size`` bytes) of ``data`` (uint8),
    over its bytes ``[21, end)`` (attributes on): what its header's ``crc`` must hold.
    One kernel call for all of them (:func:`~seglake.record.crc.crc32c_ranges`)."""
    position = np.asarray(position, dtype=np.int64)
    return crc32c_ranges(data, position + ATTRIBUTES_OFFSET, position + size)


def claimed_size(buf: bytes | memoryview, pos: int = 0) -> int:
    """The size the batch header at ``pos`` claims for its batch: ``LOG_OVERHEAD +
    batchLength`` (not checked: a damaged header claims anything)."""
    at = pos + LENGTH_OFFSET
    return LOG_OVERHEAD + int.from_bytes(buf[at : at + 4], "big", signed=True)


class SkippedBatch(NamedTuple):
    """A corrupt batch :func:`scan_batches` set aside (``skip_corrupt``); offsets are
    what its header says (not covered by the CRC)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    why: str

    def describe(self, path: str | None, start: int = 0) -> str:
        """One line: file, position (``start`` + position), offsets, size, why."""
        where = f"{path}: " if path else ""
        return (
            f"{where}position {start + self.position}: batch with offsets "
            f"{self.base_offset}..{self.last_offset} ({self.size} bytes): {self.why}"
        )


class BatchHeader(NamedTuple):
    """One decoded batch header plus where it lies in the file."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @classmethod
    def unpack_from(cls, buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
        return cls(*HEADER.unpack_from(buf, pos), pos)  # type: ignore[call-arg]  # 13 fields

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


@dataclasses.dataclass
class BatchScan:
    """Columns of the batches found by :func:`scan_batches`, one element per batch.

    ``valid_bytes`` is the end of the last complete, valid batch (relative to the file
    start, i.e. including ``start``); ``error`` says why the scan stopped early, or is
    ``None`` when it reached ``end`` exactly; ``truncated`` whether it stopped because
    the batch there runs past ``end`` (not because its bytes are wrong).
    """

    position: np.ndarray  # int64, byte position of the batch in the file
    size: np.ndarray  # int64, whole batch size (batchLength + 12)
    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    records_count: np.ndarray  # int64
    base_timestamp: np.ndarray  # int64
    max_timestamp: np.ndarray  # int64
    attributes: np.ndarray  # int64
    producer_id: np.ndarray  # int64
    producer_epoch: np.ndarray  # int64
    base_sequence: np.ndarray  # int64
    leader_epoch: np.ndarray  # int64
    crc_valid: np.ndarray  # bool
    valid_bytes: int
    error: str | None = None
    truncated: bool = False  # the scan stopped at a batch running past ``end``
    skipped: tuple[SkippedBatch, ...] = ()  # corrupt batches set aside (skip_corrupt)

    def __len__(self) -> int:
        return len(self.position)

    @property
    def why(self) -> str | None:
        """``error`` without its ``position N:`` prefix."""
        return None if self.error is None else self.error.split(": ", 1)[-1]

    @property
    def codec(self) -> np.ndarray:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> np.ndarray:
        return cast(np.ndarray, (self.attributes & CONTROL_BIT) != 0)

    @property
    def is_transactional(self) -> np.ndarray:
        return cast(np.ndarray, (self.attributes & TRANSACTIONAL_BIT) != 0)

    def header(self, i: int) -> BatchHeader:
        """The header of batch ``i`` as a :class:`BatchHeader`."""
        return BatchHeader(
            int(self.base_offset[i]),
            int(self.size[i] - LOG_OVERHEAD),
            int(self.leader_epoch[i]),
            MAGIC,
            0,
            int(self.attributes[i]),
            int(self.last_offset[i] - self.base_offset[i]),
            int(self.base_timestamp[i]),
            int(self.max_timestamp[i]),
            int(self.producer_id[i]),
            int(self.producer_epoch[i]),
            int(self.base_sequence[i]),
            int(self.records_count[i]),
            int(self.position[i]),
        )

    def take(self, sel: slice | np.ndarray) -> BatchScan:
        """The batches selected by ``sel`` (valid_bytes/error kept)."""
        fields = {f: getattr(self, f)[sel] for f in SCAN_COLUMNS}
        return BatchScan(
            **fields,
            valid_bytes=self.valid_bytes,
            error=self.error,
            truncated=self.truncated,
            skipped=self.skipped,
        )

    @classmethod
    def empty(cls, valid_bytes: int = 0, error: str | None = None) -> BatchScan:
        return _from_rows([], valid_bytes, error)


SCAN_COLUMNS = tuple(
    f.name
    for f in dataclasses.fields(BatchScan)
    if f.name not in ("valid_bytes", "error", "truncated", "skipped")
)


def batch_problem(h: BatchHeader, remaining: int) -> tuple[str | None, bool]:
    """``(why, truncated)``: why the batch at ``h.position`` is invalid (``None``: it is
    not) and whether that is only that it runs past the ``remaining`` bytes. A length
    below the minimum is corruption; a plausible one running past the end is checked
    before the magic, so a read cut inside a batch never calls it corrupt."""
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return (
            f"batch length {h.batch_length} is below the minimum {HEADER_SIZE - LOG_OVERHEAD}",
            False,
        )
    if h.size > remaining:
        return f"batch of {h.size} bytes is truncated ({remaining} bytes remain)", True
    if h.magic != MAGIC:
        return f"magic {h.magic} (expected {MAGIC})", False
    if h.records_count < 0 or h.last_offset_delta < 0:
        return (
            f"records count {h.records_count} / last offset delta {h.last_offset_delta} "
            "is negative",
            False,
        )
    return None, False


def scan_batches(
    buf: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    verify_crc: bool = True,
    stop_on_crc_error: bool = True,
    max_batches: int | None = None,
    stop_after_offset: int | None = None,
    skip_corrupt: bool = False,
) -> BatchScan:
    """Walk the batch headers of ``buf[start:end]`` without decoding records.

    Args:
        buf: the whole ``.log`` (or a window of it whose position 0 is file position 0).
        start, end: byte range to scan; positions reported are positions in ``buf``.
        verify_crc: compute CRC-32C of every batch (``crc_valid``); else all are True.
        stop_on_crc_error: stop at a batch with a bad CRC (recovery, readers) or report it
            and go on (``seglake dump``).
        max_batches: stop after this many batches.
        stop_after_offset: stop after the first batch whose last offset >= this.
        skip_corrupt: set a corrupt batch with a plausible length aside (``skipped``)
            and go on (see the module docstring).

    Never raises for bad bytes; see ``valid_bytes``, ``error`` and ``truncated``.
    """
    view = memoryview(buf)
    end = len(view) if end is None else min(end, len(view))
    rows: list[tuple[Any, ...]] = []
    crcs: list[bool] = []
    skipped: list[SkippedBatch] = []
    pos = start
    error = None
    truncated = False
    # batches the kernel found plainly valid; stopped: by stop_after_offset, in the kernel
    plain, pos, stopped = _kernel_scan(view, pos, end, max_batches, verify_crc, stop_after_offset)
    prev_last = int(plain[-1, 0] + plain[-1, 6]) if len(plain) else None
    unpack = HEADER.unpack_from
    while pos < end and not stopped:
        if max_batches is not None and len(plain) + len(rows) >= max_batches:
            break
        if end - pos < HEADER_SIZE:
            error = f"position {pos}: {end - pos} bytes left, less than a batch header"
            truncated = True
            break
        h = BatchHeader(*unpack(view, pos), pos)  # type: ignore[call-arg]  # 13 fields
        why, truncated = batch_problem(h, end - pos)
        ok = True
        if why is None and prev_last is not None and h.base_offset <= prev_last:
            why = f"batch offsets {h.base_offset}..{h.last_offset} do not follow {prev_last}"
        if why is None and verify_crc:
            computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + h.size])
            ok = computed == h.crc
            if not ok and (stop_on_crc_error or skip_corrupt):
                why = f"CRC-32C mismatch (stored {h.crc:#010x}, computed {computed:#010x})"
        if why is not None:
            plausible = h.batch_length >= HEADER_SIZE - LOG_OVERHEAD and not truncated
            if skip_corrupt and plausible and _plausible_end(view, pos + h.size, end):
                skipped.append(SkippedBatch(pos, h.size, h.base_offset, h.last_offset, why))
                pos += h.size
                continue
            error = f"position {pos}: {why}"
            break
        rows.append(h)
        crcs.append(ok)
        prev_last = h.last_offset
        pos += h.size
        if stop_after_offset is not None and h.last_offset >= stop_after_offset:
            break
    scan = _from_rows(rows, pos, error, crcs, plain)
    scan.truncated, scan.skipped = truncated and error is not None, tuple(skipped)
    return scan


def _kernel_scan(
    view: memoryview,
    pos: int,
    end: int,
    max_batches: int | None,
    verify_crc: bool,
    stop_after_offset: int | None,
) -> tuple[np.ndarray, int, bool]:
    """The compiled kernel's scan of ``view[pos:end]`` (when there is one and the range
    is large enough to gain): ``(rows, position, stopped)``, the header columns of the
    plainly valid batches it walked, where it stopped (the careful Python scan goes on
    from there) and whether ``stop_after_offset`` stopped it."""
    lib = native.kernel()
    if (
        lib is None
        or end - pos < NATIVE_SCAN_BYTES
        or (max_batches is not None and max_batches < NATIVE_SCAN_BATCHES)
    ):
        return np.zeros((0, 14), np.int64), pos, False
    data = np.frombuffer(view if view.format == "B" else view.cast("B"), np.uint8)
    return native.scan(lib, data, pos, end, max_batches, verify_crc, None, stop_after_offset)


def _plausible_end(view: memoryview, at: int, end: int) -> bool:
    """A batch ending at ``at`` has a plausible length: ``at`` is past the batch header
    and is ``end``, or a batch header with magic 2 and a valid length starts there (or
    too few bytes are left to tell: the caller's read ends there)."""
    if at > end:
        return False
    if end - at < HEADER_SIZE:
        return True
    h = BatchHeader(*HEADER.unpack_from(view, at), at)  # type: ignore[call-arg]  # 13 fields
    return h.magic == MAGIC and h.batch_length >= HEADER_SIZE - LOG_OVERHEAD


def _from_rows(
    rows: list[Any],
    valid_bytes: int,
    error: str | None,
    crcs: list[bool] | None = None,
    plain: np.ndarray | None = None,
) -> BatchScan:
    """13 header fields + position per row; ``plain``: rows before them, as an array,
    whose CRC matched or was not checked."""
    a = np.array(rows, dtype=np.int64) if rows else np.zeros((0, 14), dtype=np.int64)
    if crcs is None:
        crcs = [True] * len(rows)
    if plain is not None and len(plain):
        a = np.concatenate((plain, a)) if rows else plain
        crcs = [True] * len(plain) + crcs
    return BatchScan(
        position=a[:, 13],
        size=a[:, 1] + LOG_OVERHEAD,
        base_offset=a[:, 0],
        last_offset=a[:, 0] + a[:, 6],
        records_count=a[:, 12],
        base_timestamp=a[:, 7],
        max_timestamp=a[:, 8],
        attributes=a[:, 5],
        producer_id=a[:, 9],
        producer_epoch=a[:, 10],
        base_sequence=a[:, 11],
        leader_epoch=a[:, 2],
        crc_valid=np.array(crcs, dtype=bool),
        valid_bytes=valid_bytes,
        error=error,
    )
