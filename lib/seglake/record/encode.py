"""Vectorised encoding of records into RecordBatch v2 (magic 2) batches.

Bytes written, per batch (header layout in :mod:`seglake.record.batch`)::

    batch   = header(61) records            records: one compressed block when codec != 0
    record  = length:varint  attributes:int8 (0)  timestampDelta:varlong  offsetDelta:varint
              keyLength:varint (-1 = null)  key  valueLength:varint (-1 = null)  value
              headerCount:varint  [headerKeyLength:varint  headerKey (UTF-8)
                                   headerValueLength:varint (-1 = null)  headerValue]*

``length`` counts the bytes after itself. ``offsetDelta = offset - baseOffset``,
``timestampDelta = timestamp - baseTimestamp`` (first record's timestamp; may be negative).

How (no Python loop per record):

1. Plan: batch boundaries follow kafka-python's producer rule (a batch takes records
   while 61 + their sizes <= ``batch.size``), where a record's size depends on the batch
   it lands in (its delta varints); see :func:`_plan_exact`. One ``searchsorted`` per
   batch, everything per record is numpy.
2. Every varint of every record is computed with numpy: the bytes of
   :func:`seglake.record.varint.write_varints`, built as whole-column little-endian words
   (combined by multiplying with powers of 256) instead of scatters per byte.
3. Each record's bytes are the concatenation of a few parts, assembled row by row in C++
   by ``pyarrow.compute.binary_join_element_wise`` into one contiguous buffer::

       prefix  [61-byte batch header: first record of a batch]
               [length][attributes=0][timestampDelta][offsetDelta][keyLength]
               (binary_view: inline for <= 12 bytes, header + prefix in a side buffer;
               if a prefix is longer, the headers get a part of their own)
       key     the input column (null: skipped; keyLength is -1)
       mid     [valueLength]
       value   the input column (null: skipped)
       count   [headerCount]
       headers [keyLength key valueLength value]*: one join over all headers of all
               records, then sliced per record without copying

   The batch headers (all but the CRC) are known before the join, so the joined buffer
   *is* the uncompressed log.
4. A loop per batch fills in the CRC-32C, or compresses the batch's records block and
   writes its new header.

Compression: a batch is always compressed when a codec is set, like Kafka's Java producer.
kafka-python's builder instead writes the batch uncompressed when compression does not
shrink it; both are valid logs.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.config import LogConfig
from seglake.errors import ConfigError, InputSchemaError, OffsetOrderError
from seglake.record.batch import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CRC_OFFSET,
    HEADER_DTYPE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchScan,
)
from seglake.record.codecs import NAMES, compress
from seglake.record.crc import crc32c
from seglake.record.varint import MAX_VARLONG_BYTES, zigzag

__all__ = ["EncodedBatches", "encode_batches", "plan_batches"]

INT32_MAX = 2**31 - 1
_EMPTY_I64 = np.zeros(0, dtype=np.int64)
_CRC_COLUMNS = np.arange(CRC_OFFSET, CRC_OFFSET + 4)
# below this many output bytes Arrow's 32-bit offsets (binary) are enough
_BINARY_LIMIT = INT32_MAX - 1024


@dataclasses.dataclass
class EncodedBatches:
    """Batches encoded back to back in ``data``, and one array element per batch.

    ``first_timestamp`` is the header's baseTimestamp. ``min_timestamp`` and
    ``max_timestamp`` are the smallest and largest record timestamps as a reader sees
    them (a LogAppendTime batch: both are its maxTimestamp, the append time).
    ``record_start`` is the index, in the input, of the batch's first record.
    """

    data: np.ndarray  # uint8, all batches back to back
    position: np.ndarray  # int64, where each batch starts in data
    size: np.ndarray  # int64, whole batch size (batchLength + 12)
    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    records_count: np.ndarray  # int64
    first_timestamp: np.ndarray  # int64, baseTimestamp
    max_timestamp: np.ndarray  # int64, header maxTimestamp
    min_timestamp: np.ndarray  # int64
    record_start: np.ndarray  # int64
    attributes: np.ndarray  # int64
    base_sequence: np.ndarray  # int64
    producer_id: int = -1
    producer_epoch: int = -1
    leader_epoch: int = 0

    def __len__(self) -> int:
        return len(self.position)

    @property
    def nbytes(self) -> int:
        """Total size of all batches."""
        return len(self.data)

    @property
    def codec(self) -> int:
        """Codec id of the batches (0 when there are none)."""
        return int(self.attributes[0]) & CODEC_MASK if len(self) else 0

    def batch_bytes(self, i: int) -> memoryview:
        """The bytes of batch ``i`` (a view into ``data``)."""
        start = int(self.position[i])
        return memoryview(self.data)[start : start + int(self.size[i])]

    def tobytes(self) -> bytes:
        return self.data.tobytes()

    def to_scan(self) -> BatchScan:
        """The batches as :func:`~seglake.record.batch.scan_batches` would report them."""
        n = len(self)
        return BatchScan(
            position=self.position,
            size=self.size,
            base_offset=self.base_offset,
            last_offset=self.last_offset,
            records_count=self.records_count,
            base_timestamp=self.first_timestamp,
            max_timestamp=self.max_timestamp,
            attributes=self.attributes,
            producer_id=np.full(n, self.producer_id, dtype=np.int64),
            producer_epoch=np.full(n, self.producer_epoch, dtype=np.int64),
            base_sequence=self.base_sequence,
            leader_epoch=np.full(n, self.leader_epoch, dtype=np.int64),
            crc_valid=np.ones(n, dtype=bool),
            valid_bytes=len(self.data),
        )


# --------------------------------------------------------------------------------------
# varints and sizes

_U16, _U32, _U64 = np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8")
# continuation bits (0x80 on all but the last byte) of an s-byte varint, little-endian word
_CONT64 = np.array(
    [0] + [int.from_bytes(b"\x80" * (s - 1), "little") for s in range(1, 9)], dtype=_U64
)
_CONT32 = _CONT64[:5].astype(_U32)
_POW256 = np.array([1 << (8 * k) for k in range(8)], dtype=_U64)  # x << 8k == x * 256**k
_CHUNK = 1 << 16  # records per numpy pass: keeps the temporaries in cache
_SHR64 = np.array([64 - 8 * k if k else 0 for k in range(8)], dtype=_U64)


def _vsize_z(z: np.ndarray) -> np.ndarray:
    """Varint size (1..10) of each zig-zagged (uint64) value, as uint8.

    Same result as :func:`seglake.record.varint.varint_sizes`, but stops comparing at the
    widest value present (one or two passes instead of nine).
    """
    sizes = np.ones(len(z), dtype=np.uint8)
    if not len(z):
        return sizes
    top = int(z.max())
    k = 1
    while k < MAX_VARLONG_BYTES and top >> (7 * k):
        sizes += z >= np.uint64(1 << (7 * k))
        k += 1
    return sizes


def _vsize(values: np.ndarray) -> np.ndarray:
    return _vsize_z(zigzag(values))


def _varint_word(z: np.ndarray, s: np.ndarray, width: int) -> np.ndarray:
    """Little-endian word (uint16/32/64 for ``width`` <= 2/4/8 bytes) whose
    low ``s[i]`` bytes are the varint of the zig-zagged ``z[i]``; higher bytes are 0."""
    if width <= 2:
        dt, cont = _U16, _CONT32  # (cont unused below 4 bytes)
    else:
        dt, cont = (_U32, _CONT32) if width <= 4 else (_U64, _CONT64)
    zz = z.astype(dt)
    word = zz & dt.type(0x7F)
    for k in range(1, width):  # 7-bit group k moves to byte k
        word |= (zz << dt.type(k)) & dt.type(0x7F << (8 * k))
    if width <= 3:  # continuation bits: a compare per byte beats a table lookup
        for k in range(width - 1):
            word |= (s > k + 1).astype(dt) << dt.type(8 * k + 7)
    else:
        word |= cont[s.astype(np.intp)]
    return word


def _varint_matrix(z: np.ndarray, s: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` uint8: row ``i`` starts with the varint of the zig-zagged ``z[i]``
    (``s[i]`` bytes), zeros after. Whole-column numpy ops, no scatter."""
    n = len(z)
    if width == 1:  # values < 64 (zig-zagged < 128): the byte is the value
        return z.astype(np.uint8).reshape(n, 1)
    if width <= 8:
        word = _varint_word(z, s, width)
        return word.view(np.uint8).reshape(n, word.itemsize)[:, :width]
    out = np.empty((n, width), dtype=np.uint8)  # varlongs of 9-10 bytes: byte by byte
    for k in range(width):
        group = (z >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[:, k] = group | ((s > k + 1).astype(np.uint64) << np.uint64(7))
    return out


def _pack(
    fields: list[tuple[np.ndarray, np.ndarray] | None], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's varints back to back: ``(bytes, bytes per row)``; the general path.

    ``fields`` holds ``(zig-zagged values, sizes)`` per varint, or ``None`` for a zero
    byte (the record attributes). Rows are laid out as a fixed-width matrix, then the
    unused bytes are dropped with one boolean mask (Arrow's filter kernel).
    """
    mats: list[np.ndarray] = []
    masks: list[np.ndarray | None] = []
    lengths = np.zeros(n, dtype=np.int64)
    for field in fields:
        if field is None:
            mats.append(np.zeros((n, 1), dtype=np.uint8))
            masks.append(None)
            lengths += 1
            continue
        z, s = field
        width = int(s.max())
        mats.append(_varint_matrix(z, s, width))
        masks.append(None if int(s.min()) == width else s[:, None] > np.arange(width))
        lengths += s
    mat = np.concatenate(mats, axis=1) if len(mats) > 1 else np.ascontiguousarray(mats[0])
    if all(m is None for m in masks):
        return mat.reshape(-1), lengths
    mask = np.concatenate(
        [
            np.ones(m.shape, dtype=bool) if k is None else k
            for m, k in zip(mats, masks, strict=True)
        ],
        axis=1,
    ).reshape(-1)
    size = mask.size
    keep = pa.Array.from_buffers(
        pa.bool_(), size, [None, pa.py_buffer(np.packbits(mask, bitorder="little"))]
    )
    kept = pc.filter(pa.Array.from_buffers(pa.uint8(), size, [None, pa.py_buffer(mat)]), keep)
    return np.frombuffer(kept.buffers()[1], dtype=np.uint8, count=len(kept)), lengths


def _inline_array(views: np.ndarray, btype: pa.DataType) -> pa.Array:
    """Binary array from ``(n, 16)`` uint8 binary_view structs that all hold their value
    inline (length int32 LE, then up to 12 bytes): Arrow gathers the bytes in C++."""
    n = len(views)
    arr = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views)], null_count=0)
    return arr.cast(btype)


def _varint_array(z: np.ndarray, sizes: np.ndarray, btype: pa.DataType) -> pa.Array:
    """Arrow binary array whose element ``i`` is the varint of the zig-zagged ``z[i]``."""
    n = len(z)
    if not n:
        return pa.array([], btype)
    width = int(sizes.max())
    if int(sizes.min()) == width:  # all the same size: the matrix is the data
        data = np.ascontiguousarray(_varint_matrix(z, sizes, width)).reshape(-1)
        odt = np.int64 if pa.types.is_large_binary(btype) else np.int32
        return _from_numpy(btype, np.arange(0, (n + 1) * width, width, dtype=odt), data)
    views = np.zeros((n, 16), dtype=np.uint8)
    views[:, 0] = sizes  # length (int32 LE, < 256)
    views[:, 4 : 4 + width] = _varint_matrix(z, sizes, width)
    return _inline_array(views, btype)


class _Rel(NamedTuple):
    """Per-record varints that depend on the batch start: zig-zagged values and sizes."""

    z_off: np.ndarray  # offsetDelta
    s_off: np.ndarray
    z_ts: np.ndarray  # timestampDelta
    s_ts: np.ndarray
    z_len: np.ndarray  # length: bytes after the length varint
    s_len: np.ndarray

    @property
    def size(self) -> np.ndarray:
        """Whole encoded size of each record, length varint included (int64)."""
        return (self.z_len >> np.uint64(1)).view(np.int64) + self.s_len

    def head(self, k: int) -> _Rel:
        return _Rel(*(a[:k] for a in self))

    @staticmethod
    def concat(parts: list[_Rel]) -> _Rel:
        if len(parts) == 1:
            return parts[0]
        return _Rel(*(np.concatenate(arrays) for arrays in zip(*parts, strict=True)))


def _rel(
    fixed: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    idx: slice | np.ndarray,
    base_off: np.ndarray | np.integer,
    base_ts: np.ndarray | np.integer,
) -> _Rel:
    """The start-dependent varints of records ``idx`` in batches whose first record has
    offset ``base_off`` and timestamp ``base_ts`` (one value, or one per record).
    ``fixed``: each record's size without these varints."""
    z_off = ((off[idx] - base_off) << 1).view(np.uint64)  # offset deltas are >= 0
    s_off = _vsize_z(z_off)
    z_ts = zigzag(ts[idx] - base_ts)
    s_ts = _vsize_z(z_ts)
    body = fixed[idx] + s_off + s_ts
    z_len = (body << 1).view(np.uint64)
    return _Rel(z_off, s_off, z_ts, s_ts, z_len, _vsize_z(z_len))


def _rel_for(fixed: np.ndarray, off: np.ndarray, ts: np.ndarray, starts: np.ndarray) -> list[_Rel]:
    """:class:`_Rel` of all records for the given batch starts, in cache-sized pieces."""
    n = len(fixed)
    counts = np.diff(np.append(starts, n))
    base_off, base_ts = np.repeat(off[starts], counts), np.repeat(ts[starts], counts)
    return [
        _rel(
            fixed, off, ts, slice(a, a + _CHUNK), base_off[a : a + _CHUNK], base_ts[a : a + _CHUNK]
        )
        for a in range(0, n, _CHUNK)
    ]


def _inline_prefixes(
    rel: _Rel,
    z_key: np.ndarray,
    s_key: np.ndarray,
    s_head: np.ndarray,
    length: np.ndarray,
    views: np.ndarray,
) -> None:
    """Fill ``views`` (``(n, 2)`` uint64: binary_view structs) with inline prefixes of at
    most 12 bytes: ``head`` = length + attributes + timestampDelta (<= 7 bytes) and
    ``tail`` = offsetDelta + keyLength (<= 8 bytes), little-endian."""
    word = _varint_word(rel.z_len, rel.s_len, int(rel.s_len.max())).astype(_U64)
    w_ts = _varint_word(rel.z_ts, rel.s_ts, int(rel.s_ts.max())).astype(_U64)
    word |= w_ts * _POW256[(rel.s_len + 1).astype(np.intp)]
    tail = _varint_word(rel.z_off, rel.s_off, int(rel.s_off.max())).astype(_U64)
    w_key = _varint_word(z_key, s_key, int(s_key.max())).astype(_U64)
    tail |= w_key * _POW256[rel.s_off.astype(np.intp)]
    head_bytes = s_head.astype(np.intp)
    lo = word | tail * _POW256[head_bytes]  # prefix bytes 0..7 (tail bytes past 8 drop)
    views[:, 0] = length.astype(_U64) | (lo << np.uint64(32))
    lo >>= np.uint64(32)  # prefix bytes 4..7
    if int(length.max()) > 8:  # bytes 8..11: the part of the tail past byte 8
        lo |= (tail >> _SHR64[head_bytes]) << np.uint64(32)
    views[:, 1] = lo


def _prefix_array(
    pieces: list[_Rel],
    z_key: np.ndarray,
    s_key: np.ndarray,
    starts: np.ndarray,
    headers: np.ndarray,
    btype: pa.DataType,
) -> tuple[pa.Array, bool]:
    """Element ``i``: ``[batch header][length][attributes=0][timestampDelta][offsetDelta]
    [keyLength]``, the batch header (``headers[b]``, 61 bytes) only on the first record of
    batch ``b``. ``pieces``: the records' :class:`_Rel`, in order. Returns ``(array,
    whether the batch headers are in it)``.

    Fast path (prefixes of <= 12 bytes whose length + attributes + timestampDelta take
    <= 7 and offsetDelta + keyLength <= 8, i.e. nearly always): the varints are combined
    into little-endian words (a shift by ``8 * bytes before it`` is a multiplication by
    ``256 ** bytes``) and handed to Arrow as binary_view values, inline (up to 12 bytes)
    or, for a batch's first record, pointing at its header followed by its prefix; Arrow's
    cast to binary gathers them. Otherwise the general :func:`_pack`, without headers.
    """
    n = len(z_key)
    s_head = np.concatenate([p.s_len + p.s_ts for p in pieces]) + 1  # length .. tsDelta
    s_tail = np.concatenate([p.s_off for p in pieces]) + s_key  # offsetDelta, keyLength
    length = s_head + s_tail
    fast = int(s_head.max()) <= 7 and int(s_tail.max()) <= 8 and int(length.max()) <= 12
    if fast and 80 * len(starts) <= INT32_MAX:  # binary_view offsets are int32
        views = np.empty((n, 2), dtype=_U64)  # binary_view: length int32, 12 inline bytes
        a = 0
        for rel in pieces:
            b = a + len(rel.s_len)
            _inline_prefixes(rel, z_key[a:b], s_key[a:b], s_head[a:b], length[a:b], views[a:b])
            a = b
        # first records: a view of [header, prefix] in a side buffer, one 80-byte slot each
        nb = len(starts)
        side = np.empty((nb, 80), dtype=np.uint8)
        side[:, :HEADER_SIZE] = headers
        side[:, HEADER_SIZE : HEADER_SIZE + 12] = views.view(np.uint8)[starts, 4:]
        first = views.view(_U32).reshape(n, 4)
        first[starts, 0] = length[starts].astype(_U32) + HEADER_SIZE
        first[starts, 1] = headers[:, :4].copy().view(_U32)[:, 0]  # 4-byte prefix
        first[starts, 2] = 0  # buffer index
        first[starts, 3] = np.arange(0, 80 * nb, 80, dtype=_U32)  # offset in the buffer
        arr = pa.Array.from_buffers(
            pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(side)], null_count=0
        )
        return arr.cast(btype), True
    rel = _Rel.concat(pieces)
    data, lengths = _pack(
        [
            (rel.z_len, rel.s_len),
            None,
            (rel.z_ts, rel.s_ts),
            (rel.z_off, rel.s_off),
            (z_key, s_key),
        ],
        n,
    )
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _from_numpy(btype, offsets, data), False


# --------------------------------------------------------------------------------------
# batch planning


def _check_plan_args(batch_size: int, max_records: int) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch.size={batch_size} must be >= 1")
    if max_records < 0:
        raise ConfigError(f"batch.max.records={max_records} must be >= 0")


def _chain(
    cum: np.ndarray,
    start: int,
    budget: int,
    max_records: int,
    limit_offsets: np.ndarray | None,
    max_batches: int,
    stop_at: int | None = None,
) -> list[int]:
    """Greedy batches over fixed sizes (``cum``: prefix sums, ``cum[0] = 0``) from record
    ``start``: the starts of up to ``max_batches`` batches (or until one ends at or past
    record ``stop_at``), then the end of the last one. One ``searchsorted`` per batch."""
    n = len(cum) - 1
    stop = n if stop_at is None else min(n, stop_at)
    out = [start]
    s = start
    search = cum.searchsorted
    for _ in range(max_batches):
        if s >= stop:
            break
        e = int(search(cum[s] + budget, "right")) - 1
        if e <= s:
            e = s + 1
        if max_records and e - s > max_records:
            e = s + max_records
        if limit_offsets is not None:
            lim = int(limit_offsets.searchsorted(limit_offsets[s] + INT32_MAX, "right"))
            e = min(e, lim)
        out.append(e)
        s = e
    return out


def plan_batches(record_sizes: np.ndarray, *, batch_size: int, max_records: int = 0) -> np.ndarray:
    """Start index of each batch when records of these sizes are appended in order.

    kafka-python's ``DefaultRecordBatchBuilder`` rule: a batch takes the next record
    unless ``61 + (sizes already in it) + size > batch_size`` and it is not empty, so a
    record bigger than ``batch_size`` gets a batch of its own. With ``max_records > 0``
    a batch also holds at most that many records. Cost: one ``searchsorted`` per batch.

    Args:
        record_sizes: encoded size of each record, length varint included (int).
        batch_size: ``batch.size`` in bytes, header included.
        max_records: ``batch.max.records`` (0: no limit).

    Returns:
        int64 array ``[0, ...]`` (empty when there are no records).
    """
    _check_plan_args(batch_size, max_records)
    sizes = np.asarray(record_sizes)
    if sizes.ndim != 1 or not (len(sizes) == 0 or np.issubdtype(sizes.dtype, np.integer)):
        raise InputSchemaError(
            f"record_sizes must be a 1-D integer array, got {sizes.dtype} of shape {sizes.shape}"
        )
    sizes = sizes.astype(np.int64, copy=False)
    n = len(sizes)
    if n == 0:
        return _EMPTY_I64.copy()
    if int(sizes.min()) < 1:
        i = int(np.argmax(sizes < 1))
        raise InputSchemaError(f"record {i}: size {int(sizes[i])} must be >= 1")
    budget = batch_size - HEADER_SIZE
    if max_records == 1 or n == 1 or int((sizes[:-1] + sizes[1:]).min()) > budget:
        return np.arange(n, dtype=np.int64)  # no two neighbours fit: one record per batch
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=cum[1:])
    return np.array(_chain(cum, 0, budget, max_records, None, n)[:-1], dtype=np.int64)


def _plan_exact(
    fixed: np.ndarray, off: np.ndarray, ts: np.ndarray, *, batch_size: int, max_records: int
) -> tuple[np.ndarray, list[_Rel]]:
    """:func:`plan_batches` with each record's size taken in the batch it lands in
    (its offset and timestamp deltas depend on the batch start), exactly as
    kafka-python's builder measures it. Also returns the records' :class:`_Rel`, in
    pieces of whole batches, in order.

    Sizes depend on the plan, so the greedy rule cannot run on one size array. This
    guesses sizes (deltas taken from a grid of batches as long as the lower-bound sizes
    allow), walks the greedy chain over them a run of batches at a time, and verifies
    each run with exact sizes in one numpy pass: the verified prefix is kept and the
    first wrong batch is computed exactly. A batch also ends where an offset delta would
    exceed int32. Numpy work goes in cache-sized runs of about ``_CHUNK`` records.
    """
    n = len(fixed)
    budget = batch_size - HEADER_SIZE
    limit = off if int(off[-1]) - int(off[0]) > INT32_MAX else None
    # about as many records as fit in a batch, sizes taken as fixed + 3
    period = max(1, min(n, budget * n // (int(fixed.sum()) + 3 * n), max_records or n))
    cum = np.zeros(n + 1, dtype=np.int64)
    for a in range(0, n, _CHUNK):
        b = min(n, a + _CHUNK)
        base = np.arange(a, b) // period * period
        np.cumsum(
            _rel(fixed, off, ts, slice(a, b), off[base], ts[base]).size, out=cum[a + 1 : b + 1]
        )
        cum[a + 1 : b + 1] += cum[a]

    def exact(s: int, hint: int) -> tuple[int, _Rel]:
        """The batch starting at record ``s``, computed directly over a window of records
        that doubles until the batch ends inside it (``hint``: a guess of its length)."""
        cap = n if not max_records else min(n, s + max_records)
        if limit is not None:
            cap = min(cap, int(limit.searchsorted(limit[s] + INT32_MAX, "right")))
        width = hint + 16
        while True:
            e = min(cap, s + width)
            rel = _rel(fixed, off, ts, slice(s, e), off[s], ts[s])
            k = max(1, int(np.cumsum(rel.size).searchsorted(budget, "right")))
            if k < e - s or e == cap:
                return s + k, rel.head(k)
            width *= 2

    starts: list[int] = []
    pieces: list[_Rel] = []
    s, run = 0, n
    while s < n:
        chain = _chain(cum, s, budget, max_records, limit, run, s + _CHUNK)
        c = np.array(chain[:-1], dtype=np.int64)
        ends = np.array(chain[1:], dtype=np.int64)
        lens = ends - c
        rel = _rel(
            fixed, off, ts, slice(s, chain[-1]), np.repeat(off[c], lens), np.repeat(ts[c], lens)
        )
        total = np.add.reduceat(rel.size, c - s)
        nxt = np.minimum(ends, n - 1)  # the record that did not fit, if any
        closed = (ends >= n) | (total + _rel(fixed, off, ts, nxt, off[c], ts[c]).size > budget)
        if max_records:
            closed |= lens == max_records
        if limit is not None:
            closed |= off[nxt] - off[c] > INT32_MAX
        bad = np.flatnonzero(~(closed & ((total <= budget) | (lens == 1))))
        if not len(bad):
            starts.extend(chain[:-1])
            pieces.append(rel)
            s, run = chain[-1], run * 2
            continue
        f = int(bad[0])  # batches before f are right; f starts right but ends wrong
        starts.extend(chain[: f + 1])
        if f:
            pieces.append(rel.head(chain[f] - s))
        s, rel = exact(chain[f], int(lens[f]))
        pieces.append(rel)
        run = max(2 * f, 16)
    return np.array(starts, dtype=np.int64), pieces


# --------------------------------------------------------------------------------------
# input columns


@dataclasses.dataclass
class _Headers:
    count: np.ndarray  # int64 per record
    entry_bytes: np.ndarray  # int64 per record: encoded headers after the count varint
    joined: pa.Array  # per record: its encoded headers, back to back


def _column(records: pa.Table | pa.RecordBatch, name: str) -> pa.ChunkedArray | None:
    i = records.schema.get_field_index(name)
    if i < 0:
        return None
    col = records.column(i)
    return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col], col.type)


def _single(col: pa.ChunkedArray) -> pa.Array:
    if col.num_chunks == 1:
        return col.chunk(0)
    if col.num_chunks == 0:
        return pa.array([], col.type)
    return col.combine_chunks()


def _first_null(col: pa.ChunkedArray | pa.Array) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _int64_column(records: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    col = _column(records, name)
    if col is None:
        raise InputSchemaError(f"input has no {name!r} column (columns: {records.schema.names})")
    t = col.type
    if pa.types.is_timestamp(t) and name == "timestamp":
        col = col.cast(pa.timestamp("ms", t.tz), safe=False).cast(pa.int64())
    elif pa.types.is_integer(t):
        try:
            col = col.cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise InputSchemaError(f"column {name!r} ({t}) does not fit int64: {exc}") from None
    else:
        raise InputSchemaError(f"column {name!r} has type {t}; expected an integer type")
    if col.null_count:
        raise InputSchemaError(f"row {_first_null(col)}: {name} is null")
    return _single(col).to_numpy().astype(np.int64, copy=False)


def _is_binary_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_null(t)
    )


def _bytes_column(records: pa.Table | pa.RecordBatch, name: str, n: int) -> pa.ChunkedArray:
    col = _column(records, name)
    if col is None:
        return pa.chunked_array([pa.nulls(n, pa.binary())])
    if not _is_binary_like(col.type):
        raise InputSchemaError(f"column {name!r} has type {col.type}; expected binary")
    if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        col = col.cast(pa.large_binary() if _is_large(col.type) else pa.binary())
    return col


def _is_large(t: pa.DataType) -> bool:
    return pa.types.is_large_binary(t) or pa.types.is_large_string(t)


def _lengths(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Byte length of each value, -1 for null, int64."""
    lens = pc.binary_length(col).fill_null(-1)
    if isinstance(lens, pa.ChunkedArray):
        lens = _single(lens)
    return lens.to_numpy().astype(np.int64, copy=False)


def _as(col: pa.ChunkedArray | pa.Array, btype: pa.DataType) -> pa.Array:
    if col.type != btype:
        col = col.cast(btype)
    return _single(col) if isinstance(col, pa.ChunkedArray) else col


def _from_numpy(btype: pa.DataType, offsets: np.ndarray, data: np.ndarray | pa.Buffer) -> pa.Array:
    odt = np.int64 if pa.types.is_large_binary(btype) else np.int32
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(
        btype,
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(odt, copy=False)), buf],
        null_count=0,
    )


def _data_of(arr: pa.Array) -> tuple[pa.Buffer, int]:
    """Data buffer of a (large) binary array and where element 0 starts in it."""
    odt = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=odt, count=arr.offset + 1)
    return arr.buffers()[2], int(offsets[arr.offset])


def _join(parts: list[pa.Array], btype: pa.DataType) -> pa.Array:
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", btype), null_handling="skip")


def _headers_column(
    records: pa.Table | pa.RecordBatch,
) -> tuple[pa.ChunkedArray, np.ndarray] | None:
    """The headers column as list<struct<key, value>> and its per-record counts, or None."""
    col = _column(records, "headers")
    if col is None or pa.types.is_null(col.type):
        return None
    t = col.type
    if pa.types.is_map(t):
        col = col.cast(pa.list_(pa.struct([("key", t.key_type), ("value", t.item_type)])))
        t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_struct(
        t.value_type
    ):
        raise InputSchemaError(
            f"column 'headers' has type {t}; expected list<struct<key: string, value: binary>>"
        )
    st = t.value_type
    if st.get_field_index("key") < 0 or st.get_field_index("value") < 0:
        raise InputSchemaError(f"column 'headers': struct {st} needs fields 'key' and 'value'")
    counts = pc.list_value_length(col).fill_null(0)
    counts = _single(counts).to_numpy().astype(np.int64, copy=False)
    if not counts.any():
        return None
    return col, counts


def _prepare_headers(col: pa.ChunkedArray, counts: np.ndarray, btype: pa.DataType) -> _Headers:
    n = len(counts)
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    flat = _single(col).flatten()  # struct array, all headers of all records in order

    def where(j: int) -> str:
        row = int(first.searchsorted(j, "right")) - 1
        return f"row {row}, header {j - int(first[row])}"

    if flat.null_count:
        raise InputSchemaError(f"{where(_first_null(flat))}: header is null")
    keys = pc.struct_field(flat, "key")
    values = pc.struct_field(flat, "value")
    if not (_is_binary_like(keys.type) and _is_binary_like(values.type)):
        raise InputSchemaError(
            f"headers: key {keys.type} / value {values.type}; expected string / binary"
        )
    if keys.null_count:
        raise InputSchemaError(f"{where(_first_null(keys))}: header key is null")
    if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
        j = _first_invalid_utf8(keys)  # raw bytes keys must be UTF-8: Kafka keys are strings
        if j >= 0:
            raise InputSchemaError(f"{where(j)}: header key is not valid UTF-8")
    keys, values = _as(keys, btype), _as(values, btype)
    klen, vlen = _lengths(keys), _lengths(values)
    zk, zv = zigzag(klen), zigzag(vlen)
    vk, vv = _vsize_z(zk), _vsize_z(zv)
    entries = _join(
        [_varint_array(zk, vk, btype), keys, _varint_array(zv, vv, btype), values], btype
    )
    entry_cum = np.zeros(len(klen) + 1, dtype=np.int64)
    np.cumsum(vk + klen + vv + np.maximum(vlen, 0), out=entry_cum[1:])
    data, start = _data_of(entries)
    per_record = entry_cum[first]
    joined = _from_numpy(btype, per_record, data.slice(start))
    return _Headers(counts, np.diff(per_record), joined)


def _first_invalid_utf8(arr: pa.Array) -> int:
    """Index of the first value of a binary array that is not UTF-8, or -1 (bisection)."""
    stype = pa.large_string() if _is_large(arr.type) else pa.string()

    def valid(a: pa.Array) -> bool:
        try:
            a.cast(stype)
        except pa.ArrowInvalid:
            return False
        return True

    if valid(arr):
        return -1
    lo, hi = 0, len(arr)  # the first bad value is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if valid(arr.slice(lo, mid - lo)):
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------
# encoding


def encode_batches(
    records: pa.Table | pa.RecordBatch,
    *,
    batch_starts: np.ndarray | None = None,
    config: LogConfig | None = None,
    codec: int | None = None,
    level: int | None = None,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    leader_epoch: int = 0,
    log_append_time: int | None = None,
) -> EncodedBatches:
    """Encode records into RecordBatch v2 batches, back to back in one buffer.

    Args:
        records: columns ``offset`` (int64, strictly increasing), ``timestamp`` (int64 epoch
            ms, or an Arrow timestamp), ``key`` and ``value`` (binary, nullable; a missing
            column is all null) and optionally ``headers``
            (``list<struct<key: string, value: binary>>``, a null list = no headers).
            Other columns are ignored.
        batch_starts: index of the first record of each batch (``[0, ...]``, increasing).
            Default: planned like kafka-python's producer fills batches (see
            :func:`plan_batches`), with each record's size measured in the batch it lands
            in, ``config.batch_size`` / ``config.batch_max_records``, and a new batch where
            an offset delta would not fit int32.
        config: batching and compression settings (default :class:`LogConfig()`).
        codec, level: override ``config``'s compression (0 none, 1 gzip, 2 snappy, 3 lz4,
            4 zstd). Every batch is compressed when a codec is set.
        timestamp_type: 0 CreateTime, 1 LogAppendTime (attribute bit 3; record deltas are
            written as given and maxTimestamp is the append time).
        producer_id, producer_epoch: written to every batch (-1: none).
        base_sequence: sequence of the first record (-1: none); batch ``i`` gets
            ``(base_sequence + record_start[i]) mod 2**31``, as an idempotent producer numbers
            records.
        transactional: set attribute bit 4 (needs ``producer_id >= 0``).
        leader_epoch: partitionLeaderEpoch of every batch.
        log_append_time: LogAppendTime only: the append time written as maxTimestamp
            (default: each batch's largest record timestamp).

    Raises:
        InputSchemaError: a missing or mistyped column, a null offset/timestamp/header
            key, bad ``batch_starts``; the message names the row.
        OffsetOrderError: offsets not strictly increasing or negative, or an offset delta
            beyond int32 inside one of the given ``batch_starts``.
        ConfigError: an invalid codec, timestamp type or batch size.
    """
    config = config or LogConfig()
    if codec is None:
        codec = config.codec
    if level is None:
        level = {1: config.gzip_level, 3: config.lz4_level, 4: config.zstd_level}.get(codec)
    if codec not in NAMES:
        raise ConfigError(f"codec {codec}: expected one of {sorted(NAMES)} ({NAMES})")
    if timestamp_type not in (0, 1):
        raise ConfigError(
            f"timestamp_type {timestamp_type}: expected 0 (CreateTime) or 1 (LogAppendTime)"
        )
    if log_append_time is not None and timestamp_type != 1:
        raise ConfigError("log_append_time is only meaningful with timestamp_type=1")
    if transactional and producer_id < 0:
        raise ConfigError(f"transactional batches need a producer id, got {producer_id}")
    if not isinstance(records, (pa.Table, pa.RecordBatch)):
        raise InputSchemaError(f"expected a pyarrow Table or RecordBatch, got {type(records)}")

    n = records.num_rows
    off = _int64_column(records, "offset")
    ts = _int64_column(records, "timestamp")
    if n == 0:
        return _empty(producer_id, producer_epoch, leader_epoch)
    _check_offsets(off)
    key = _bytes_column(records, "key", n)
    value = _bytes_column(records, "value", n)
    klen, vlen = _lengths(key), _lengths(value)
    for name, lens in (("key", klen), ("value", vlen)):
        if int(lens.max()) > INT32_MAX:
            i = int(np.argmax(lens))
            raise InputSchemaError(f"row {i}: {name} of {int(lens[i])} bytes exceeds int32")
    hcol = _headers_column(records)
    # output size, over-estimated (Arrow nbytes: data + offsets of the referenced rows)
    estimate = key.nbytes + value.nbytes + (hcol[0].nbytes if hcol else 0) + (HEADER_SIZE + 40) * n
    btype = pa.large_binary() if estimate > _BINARY_LIMIT else pa.binary()
    headers = _prepare_headers(hcol[0], hcol[1], btype) if hcol else None

    zk, zv = zigzag(klen), zigzag(vlen)
    vk, vv = _vsize_z(zk), _vsize_z(zv)
    fixed = np.maximum(klen, 0) + np.maximum(vlen, 0) + vk + vv + 1  # attributes .. value
    if headers is not None:
        zc = zigzag(headers.count)
        vc = _vsize_z(zc)
        fixed += vc + headers.entry_bytes
    else:
        fixed += 1  # headerCount 0
    lo, hi = int(ts.min()), int(ts.max())
    if hi - lo > 2**63 - 1:
        raise InputSchemaError(
            f"timestamps {lo} and {hi} are too far apart: their "
            "difference, a possible timestampDelta, overflows int64"
        )

    if batch_starts is None:
        _check_plan_args(config.batch_size, config.batch_max_records)
        starts, pieces = _plan_exact(
            fixed, off, ts, batch_size=config.batch_size, max_records=config.batch_max_records
        )
    else:
        starts = _check_starts(batch_starts, n)
        _check_deltas(off, starts)
        pieces = _rel_for(fixed, off, ts, starts)
    nb = len(starts)
    ends = np.append(starts[1:], n)
    counts = ends - starts
    sizes = np.concatenate([p.size for p in pieces])  # of each record
    size = np.add.reduceat(sizes, starts) + HEADER_SIZE
    if int(size.max()) - LOG_OVERHEAD > INT32_MAX:
        i = int(np.argmax(size))
        raise InputSchemaError(
            f"batch {i} (rows {int(starts[i])}..{int(ends[i]) - 1}) would be "
            f"{int(size[i])} bytes; batchLength must fit int32"
        )

    # the 61-byte headers, CRC still 0
    max_ts = np.maximum.reduceat(ts, starts)
    if log_append_time is not None:
        max_ts = np.full(nb, log_append_time, dtype=np.int64)
    min_ts = max_ts if timestamp_type == 1 else np.minimum.reduceat(ts, starts)
    attributes = (
        codec
        | (TIMESTAMP_TYPE_BIT if timestamp_type else 0)
        | (TRANSACTIONAL_BIT if transactional else 0)
    )
    sequence = (
        (base_sequence + starts) % (INT32_MAX + 1)
        if base_sequence >= 0
        else np.full(nb, -1, dtype=np.int64)
    )
    hdr = np.zeros(nb, dtype=HEADER_DTYPE)
    hdr["base_offset"] = off[starts]
    hdr["batch_length"] = size - LOG_OVERHEAD
    hdr["leader_epoch"] = leader_epoch
    hdr["magic"] = MAGIC
    hdr["attributes"] = attributes
    hdr["last_offset_delta"] = off[ends - 1] - off[starts]
    hdr["base_timestamp"] = ts[starts]
    hdr["max_timestamp"] = max_ts
    hdr["producer_id"] = producer_id
    hdr["producer_epoch"] = producer_epoch
    hdr["base_sequence"] = sequence
    hdr["records_count"] = counts

    # parts of each record, joined row by row (see the module docstring)
    prefix, with_headers = _prefix_array(
        pieces, zk, vk, starts, hdr.view(np.uint8).reshape(nb, HEADER_SIZE), btype
    )
    parts = [prefix, _as(key, btype), _varint_array(zv, vv, btype), _as(value, btype)]
    if not with_headers:
        header_off = np.zeros(n + 1, dtype=np.int64)
        header_off[starts + 1] = HEADER_SIZE
        np.cumsum(header_off, out=header_off)
        parts.insert(0, _from_numpy(btype, header_off, hdr.view(np.uint8)))
    if headers is None:
        parts.append(
            _from_numpy(btype, np.arange(n + 1, dtype=np.int64), np.zeros(n, dtype=np.uint8))
        )
    else:
        parts += [_varint_array(zc, vc, btype), headers.joined]
    buf, first = _data_of(_join(parts, btype))
    total = int(size.sum())
    data = np.frombuffer(buf, dtype=np.uint8, count=total, offset=first)
    if not data.flags.writeable:
        data = data.copy()
    position = np.zeros(nb, dtype=np.int64)
    np.cumsum(size[:-1], out=position[1:])

    if codec == 0:
        crcs = _batch_crcs(data, position, size)
        data[position[:, None] + _CRC_COLUMNS] = crcs.astype(">u4").view(np.uint8).reshape(nb, 4)
    else:
        data, position, size = _compress_batches(data, position, size, hdr, codec, level)
    return EncodedBatches(
        data=data,
        position=position,
        size=size,
        base_offset=off[starts].copy(),
        last_offset=off[ends - 1].copy(),
        records_count=counts,
        first_timestamp=ts[starts].copy(),
        max_timestamp=max_ts,
        min_timestamp=min_ts,
        record_start=starts,
        attributes=np.full(nb, attributes, dtype=np.int64),
        base_sequence=sequence,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        leader_epoch=leader_epoch,
    )


def _batch_crcs(data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
    """CRC-32C of bytes [21, end) of every batch (one C call per batch)."""
    view = memoryview(data)
    starts = (position + ATTRIBUTES_OFFSET).tolist()
    ends = (position + size).tolist()
    return np.array([crc32c(view[a:b]) for a, b in zip(starts, ends, strict=True)], dtype=np.uint32)


def _compress_batches(
    data: np.ndarray,
    position: np.ndarray,
    size: np.ndarray,
    hdr: np.ndarray,
    codec: int,
    level: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compress each batch's records block; new headers (batchLength, CRC) and layout."""
    view = memoryview(data)
    starts = (position + HEADER_SIZE).tolist()
    ends = (position + size).tolist()
    blocks = [compress(codec, view[a:b], level) for a, b in zip(starts, ends, strict=True)]
    new_size = np.array([len(b) for b in blocks], dtype=np.int64) + HEADER_SIZE
    hdr["batch_length"] = new_size - LOG_OVERHEAD
    raw = hdr.view(np.uint8).reshape(len(hdr), -1)
    hdr["crc"] = [crc32c(b, crc32c(raw[i, ATTRIBUTES_OFFSET:])) for i, b in enumerate(blocks)]
    head = hdr.tobytes()
    parts: list[bytes] = []
    for i, block in enumerate(blocks):
        parts.append(head[i * HEADER_SIZE : (i + 1) * HEADER_SIZE])
        parts.append(block)
    position = np.zeros(len(hdr), dtype=np.int64)
    np.cumsum(new_size[:-1], out=position[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), position, new_size


def _check_offsets(off: np.ndarray) -> None:
    if off[0] < 0:
        raise OffsetOrderError(f"row 0: offset {int(off[0])} is negative")
    bad = np.flatnonzero(off[1:] <= off[:-1])
    if len(bad):
        i = int(bad[0]) + 1
        raise OffsetOrderError(
            f"row {i}: offset {int(off[i])} is not greater than offset {int(off[i - 1])} of "
            f"row {i - 1}; offsets must be strictly increasing"
        )


def _check_deltas(off: np.ndarray, starts: np.ndarray) -> None:
    """Offset deltas inside the given batches must fit int32."""
    last = np.append(starts[1:], len(off)) - 1
    span = off[last] - off[starts]
    if int(span.max()) > INT32_MAX:
        b = int(np.argmax(span > INT32_MAX))
        lo, hi = int(starts[b]), int(last[b])
        i = lo + int(np.argmax(off[lo : hi + 1] - off[lo] > INT32_MAX))
        raise OffsetOrderError(
            f"row {i}: offset {int(off[i])} is {int(off[i]) - int(off[lo])} past the base "
            f"offset {int(off[lo])} of its batch (row {lo}); offset deltas must fit int32"
        )


def _check_starts(batch_starts: np.ndarray, n: int) -> np.ndarray:
    s = np.asarray(batch_starts)
    if s.ndim != 1 or not (len(s) == 0 or np.issubdtype(s.dtype, np.integer)):
        raise InputSchemaError(
            f"batch_starts must be a 1-D integer array, got {s.dtype} of shape {s.shape}"
        )
    s = s.astype(np.int64)
    if not len(s) or s[0] != 0:
        raise InputSchemaError(f"batch_starts must begin with 0, got {s[:3].tolist()}")
    bad = np.flatnonzero(s[1:] <= s[:-1])
    if len(bad):
        i = int(bad[0]) + 1
        raise InputSchemaError(
            f"batch_starts[{i}] = {int(s[i])} is not greater than "
            f"batch_starts[{i - 1}] = {int(s[i - 1])}"
        )
    if s[-1] >= n:
        raise InputSchemaError(f"batch_starts[-1] = {int(s[-1])} is past the last row ({n - 1})")
    return s


def _empty(producer_id: int, producer_epoch: int, leader_epoch: int) -> EncodedBatches:
    e = _EMPTY_I64
    return EncodedBatches(
        data=np.zeros(0, dtype=np.uint8),
        position=e.copy(),
        size=e.copy(),
        base_offset=e.copy(),
        last_offset=e.copy(),
        records_count=e.copy(),
        first_timestamp=e.copy(),
        max_timestamp=e.copy(),
        min_timestamp=e.copy(),
        record_start=e.copy(),
        attributes=e.copy(),
        base_sequence=e.copy(),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        leader_epoch=leader_epoch,
    )
