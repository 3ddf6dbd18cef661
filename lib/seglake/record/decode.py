"""Decode the records of RecordBatch v2 batches into the internal record table.

Three stages over all selected batches at once: the records blocks (the file buffer itself,
or the blocks decompressed into one buffer, within a memory budget); the records and their
fields, located and checked by :mod:`seglake.record.walk` (record layout there); the
columns, where keys/values (and headers) are gathered by Arrow: a ``binary_view`` array
pointing into the records blocks, cast to ``binary``. :func:`record_times` runs the first
two stages only: the offsets and timestamps, every record checked all the same.

With the compiled kernel (:mod:`seglake.record.native`), the last two stages are one C walk
and one C copy (:mod:`seglake.record.decode_native`); the numpy stages run where it is
absent or refuses the bytes, and name the problem.

Bytes that do not decode raise :class:`CorruptRecordError` naming the file, the batch
position, the record and the numbers; nothing is allocated from an unchecked length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError, TruncatedBatchError
from seglake.record import native
from seglake.record.batch import BatchScan, scan_batches
from seglake.record.batch_walk import walk_batches
from seglake.record.codecs import MAX_BLOCK_OUTPUT
from seglake.record.decode_native import (
    decode_native,
    header_structs,
    times_native,
    walk_native,
)
from seglake.record.schema import HEADERS_TYPE, RECORD_SCHEMA, empty_records, without_headers
from seglake.record.varint import fast_varints
from seglake.record.walk import (
    MIN_HEADER_SIZE,
    MIN_RECORD_BODY,
    MIN_RECORD_SIZE,
    BatchContext,
    HeaderFields,
    walk_headers,
)

# fast_varints (seglake.record.varint) and MIN_* (seglake.record.walk): re-exported
__all__ = [
    "MAX_BATCH_OUTPUT",
    "MIN_HEADER_SIZE",
    "MIN_RECORD_BODY",
    "MIN_RECORD_SIZE",
    "decode_batch",
    "decode_batches",
    "fast_varints",
    "read_log",
    "record_times",
]

MAX_BATCH_OUTPUT = MAX_BLOCK_OUTPUT  # refuse a records block that inflates beyond this
_INLINE = 12  # binary_view keeps values of up to 12 bytes inside the view
_MAX_BINARY = (1 << 31) - 1  # bytes of one pa.binary() chunk
_WINDOW = 1 << 30  # binary_view offsets are int32: data beyond 2 GiB is cut into windows
# _INLINE_MASKS[k]: keeps the first k of 12 inline bytes (as three int32), zeroes the rest
_INLINE_MASKS = (
    (np.arange(_INLINE)[None, :] < np.arange(_INLINE + 1)[:, None])
    .astype(np.uint8)
    .__mul__(0xFF)
    .view(np.int32)
)


def read_log(
    buf: bytes | bytearray | memoryview,
    *,
    path: str | None = None,
    skip_control: bool = True,
    verify_crc: bool = True,
) -> tuple[pa.Table, BatchScan]:
    """Scan and decode a whole ``.log`` buffer: ``(records, scan)``.

    A truncated or corrupt tail is not an error: the scan stops there (``scan.valid_bytes``,
    ``scan.error``) and only the batches before it are decoded.
    """
    scan = scan_batches(buf, verify_crc=verify_crc)
    return decode_batches(buf, scan, skip_control=skip_control, path=path), scan


def decode_batch(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    path: str | None = None,
    skip_control: bool = False,
    verify_crc: bool = True,
) -> pa.Table:
    """Records of the single batch at byte ``position`` of ``buf``.

    Raises :class:`CorruptRecordError` if no whole, valid batch starts there
    (:class:`TruncatedBatchError` if it runs past the end of ``buf``).
    """
    scan = scan_batches(buf, start=position, max_batches=1, verify_crc=verify_crc)
    if not len(scan):
        error = TruncatedBatchError if scan.truncated else CorruptRecordError
        raise error(f"no valid batch: {scan.why}", path=path, position=position)
    return decode_batches(buf, scan, skip_control=skip_control, path=path)


def decode_batches(
    buf: bytes | bytearray | memoryview,
    scan: BatchScan,
    *,
    skip_control: bool = True,
    path: str | None = None,
    max_batch_bytes: int = MAX_BATCH_OUTPUT,
    max_decompressed_bytes: int | None = None,
    headers: bool = True,
) -> pa.Table:
    """One row per record of the batches of ``scan`` (found in ``buf``), in file order.

    Columns are exactly :data:`RECORD_SCHEMA`; with ``headers=False``, without the
    ``headers`` column: the headers are walked and checked, but their bytes are not
    copied, nor their keys checked to be UTF-8. Control batches (transaction markers) are
    left out when ``skip_control``. Batches are decoded whether or not ``scan.crc_valid``
    says their CRC matched.

    Decompression is bounded: one records block inflates to at most ``max_batch_bytes``,
    all of them together to at most ``max_decompressed_bytes`` (default
    :func:`~seglake.record.codecs.inflate_budget` of their compressed size: 256x, at
    least 16 MiB). A batch past either raises :class:`CorruptRecordError`.
    """
    limits = (max_batch_bytes, max_decompressed_bytes)
    sel = _selected(scan, skip_control)
    if not len(sel):
        return empty_records(headers=headers)
    lib = native.kernel()
    walked = walk_native(lib, buf, scan, sel, path, limits) if lib is not None else None
    table = decode_native(walked, scan, sel, headers=headers) if walked is not None else None
    if table is not None:
        return table
    r = walk_batches(buf, scan, sel, path, limits)  # numpy: also names what is wrong
    data, f, rec_batch = r.data, r.fields, r.ctx.rec_batch
    hdr = (data, f["header_pos"], f["header_count"], r.rec_end, r.ctx)
    if not headers:
        walk_headers(*hdr)  # checked all the same
    columns = [
        pa.array(r.offset),
        pa.array(r.timestamp),
        pa.array(r.log_append.astype(np.int32)[rec_batch]),
        _binary(data, f["key_pos"], f["key_len"]),
        _binary(data, f["value_pos"], f["value_len"]),
        *([_headers(*hdr)] if headers else []),
        pa.array(scan.producer_id[sel][rec_batch]),
        pa.array(scan.is_transactional[sel][rec_batch]),
    ]
    schema = RECORD_SCHEMA if headers else without_headers(RECORD_SCHEMA)
    return pa.Table.from_arrays(columns, schema=schema)


def record_times(
    buf: bytes | bytearray | memoryview,
    scan: BatchScan,
    *,
    skip_control: bool = True,
    path: str | None = None,
    max_batch_bytes: int = MAX_BATCH_OUTPUT,
    max_decompressed_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(offset, timestamp)`` of the records :func:`decode_batches` returns (same order).

    Every record is walked and checked as :func:`decode_batches` checks it (lengths,
    deltas, headers, header keys' UTF-8), so bytes it refuses raise the same
    :class:`CorruptRecordError` here; but no key, value or header column is built. (The
    one check left out: a key or value of over 1 GiB in a buffer of over 2 GiB, which
    :func:`decode_batches` cannot put in a column.)
    """
    limits = (max_batch_bytes, max_decompressed_bytes)
    sel = _selected(scan, skip_control)
    if not len(sel):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    lib = native.kernel()
    walked = walk_native(lib, buf, scan, sel, path, limits) if lib is not None else None
    times = times_native(walked) if walked is not None else None
    if times is not None:
        return times
    r = walk_batches(buf, scan, sel, path, limits)  # numpy: also names what is wrong
    f = r.fields
    h = walk_headers(r.data, f["header_pos"], f["header_count"], r.rec_end, r.ctx)
    if len(h.key_pos):
        _header_keys(r.data, h, r.ctx)
    return r.offset, r.timestamp


def _selected(scan: BatchScan, skip_control: bool) -> np.ndarray:
    """The batches of ``scan`` to decode."""
    return np.flatnonzero(~scan.is_control) if skip_control else np.arange(len(scan))


def _headers(
    data: np.ndarray, pos: np.ndarray, count: np.ndarray, end: np.ndarray, ctx: BatchContext
) -> pa.Array:
    """The ``headers`` column: ``list<struct<key: string, value: binary>>``."""
    h = walk_headers(data, pos, count, end, ctx)
    keys = _header_keys(data, h, ctx)
    offsets = np.zeros(len(count) + 1, dtype=np.int32)
    np.cumsum(count, out=offsets[1:])
    values = _binary(data, h.value_pos, h.value_len)
    return pa.ListArray.from_arrays(
        pa.array(offsets), header_structs(keys, values), type=HEADERS_TYPE
    )


def _header_keys(data: np.ndarray, h: HeaderFields, ctx: BatchContext) -> pa.Array:
    """The header keys as strings; raises for a key that is not UTF-8."""
    if len(h.key_pos) > _MAX_BINARY:
        raise ctx.record_error(
            int(h.owner[0]), f"{len(h.key_pos)} headers are more than a column holds"
        )
    keys = _binary(data, h.key_pos, h.key_len)
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        i = _first_bad_utf8(keys)
        owner = int(h.owner[np.searchsorted(h.first, i, side="right") - 1])
        raise ctx.record_error(owner, "a header key is not valid UTF-8") from None


def _first_bad_utf8(keys: pa.Array | pa.ChunkedArray) -> int:
    for i, k in enumerate(keys.to_pylist()):
        try:
            k.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return 0


def _binary(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """``pa.binary()`` of ``data[pos[i]:pos[i] + length[i]]``, null where ``length < 0``.

    Builds a ``binary_view`` array over ``data`` (16-byte views: int32 length, then the
    bytes inline if <= 12, else a 4-byte prefix, int32 buffer index and int32 offset) and
    lets Arrow cast it, which copies each value once. Over 2 GiB comes back chunked.
    """
    n = len(pos)
    valid = length >= 0
    all_valid = bool(valid.all())
    size = length if all_valid else np.where(valid, length, 0)
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = size
    span = len(data)
    buffers = [pa.py_buffer(data)]
    is_long = size > _INLINE
    n_long = int(np.count_nonzero(is_long))
    long_ = slice(None) if n_long == n else np.flatnonzero(is_long)
    short = slice(None) if n_long == 0 else np.flatnonzero(~is_long)
    if n_long:
        lp = pos[long_]
        views[long_, 1] = np.ndarray((span - 3,), np.int32, buffer=data, strides=(1,))[lp]
        if span > _MAX_BINARY:
            widest = int(size[long_].max())
            if widest > _WINDOW:
                raise CorruptRecordError(
                    f"a key, value or header of {widest} bytes is larger "
                    f"than seglake supports ({_WINDOW})"
                )
            buffers = [
                pa.py_buffer(data[a : a + _WINDOW + widest]) for a in range(0, span, _WINDOW)
            ]
            views[long_, 2] = lp // _WINDOW
            views[long_, 3] = lp % _WINDOW
        else:
            views[long_, 2] = 0
            views[long_, 3] = lp
    if n_long < n:
        sp = pos[short]
        near = sp > span - _INLINE
        inline = _windows(data, _INLINE)[np.minimum(sp, max(span - _INLINE, 0))]
        inline = inline.view(np.int32).reshape(-1, 3)
        if near.any():  # within 12 bytes of the end of data: gather byte by byte
            idx = np.minimum(sp[near, None] + np.arange(_INLINE), span - 1)
            inline[near] = data[idx].view(np.int32)
        inline &= _INLINE_MASKS[size[short]]
        views[short, 1:] = inline
    validity = None if all_valid else pa.py_buffer(np.packbits(valid, bitorder="little"))
    views_array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), *buffers]
    )
    total = int(size.sum())
    if total <= _MAX_BINARY:
        return views_array.cast(pa.binary())
    chunks, start, ends = [], 0, np.cumsum(size)
    while start < n:
        done_before = int(ends[start - 1]) if start else 0
        stop = max(int(np.searchsorted(ends, done_before + _MAX_BINARY, side="right")), start + 1)
        chunks.append(views_array.slice(start, stop - start).cast(pa.binary()))
        start = stop
    return pa.chunked_array(chunks, pa.binary())


def _windows(data: np.ndarray, width: int) -> np.ndarray:
    """Overlapping ``width``-byte windows of ``data``: ``[i]`` is ``data[i:i + width]``."""
    if len(data) < width:
        data = np.concatenate((data, np.zeros(width - len(data), dtype=np.uint8)))
    return np.ndarray(
        (len(data) - width + 1,), np.dtype((np.void, width)), buffer=data, strides=(1,)
    )
