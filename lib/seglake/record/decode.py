"""The numpy path's record columns (:func:`numpy_table`, :func:`numpy_times`) from the
numpy record walk (:mod:`seglake.record.batch_walk`), for
:mod:`seglake.record.reader`, which chooses this path where the compiled kernel is
absent or refuses the bytes (this one names the problem).

The records blocks (the file buffer itself, or the blocks decompressed into one buffer,
within a memory budget) and the records and their fields, located and checked by
:mod:`seglake.record.walk` (record layout there), come from the walk; here the columns,
where keys/values (and headers) are gathered by Arrow: a ``binary_view`` array pointing
into the records blocks, cast to ``binary``. :func:`numpy_times` builds none: the
offsets and timestamps, every header checked all the same.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError
from seglake.record.batch import BatchScan
from seglake.record.batch_walk import Walked
from seglake.record.decode_native import header_structs
from seglake.record.schema import HEADERS_TYPE, RECORD_SCHEMA, without_headers
from seglake.record.walk import BatchContext, HeaderFields, walk_headers

__all__ = ["numpy_table", "numpy_times"]

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


def numpy_table(r: Walked, scan: BatchScan, *, headers: bool = True) -> pa.Table:
    """The records of the numpy walk ``r`` of the batches ``r.sel`` of ``scan`` as
    :data:`RECORD_SCHEMA` (without ``headers``: no headers column, the headers walked and
    checked all the same)."""
    data, f, rec_batch, sel = r.data, r.fields, r.ctx.rec_batch, r.sel
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


def numpy_times(r: Walked) -> tuple[np.ndarray, np.ndarray]:
    """``(offset, timestamp)`` of the numpy walk ``r``, its headers walked and their keys
    checked to be UTF-8 as :func:`numpy_table` checks them."""
    f = r.fields
    h = walk_headers(r.data, f["header_pos"], f["header_count"], r.rec_end, r.ctx)
    if len(h.key_pos):
        _header_keys(r.data, h, r.ctx)
    return r.offset, r.timestamp


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
