"""The kernel path of :mod:`seglake.record.reader`: the record table of
:func:`~seglake.record.reader.decode_batches` from the compiled kernel
(:mod:`seglake.record.native`): one C walk checks every record and fills the offsets,
timestamps and the Arrow offset/validity buffers, one C pass copies the keys, values and
headers (unless asked not to) into the Arrow data buffers::

    key, value      binary: validity bits, int32 offsets (n + 1), data
    headers         list (int32 offsets, n + 1) of struct<key: string, value: binary>

``None`` (the caller then runs the numpy walk, which names the problem) when the kernel
refuses the bytes, a header key is not UTF-8, or a column would pass int32 offsets.
"""

from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from seglake.record import native
from seglake.record.batch import TIMESTAMP_TYPE_BIT, BatchScan
from seglake.record.batch_walk import batch_blocks
from seglake.record.schema import HEADER_TYPE, HEADERS_TYPE, RECORD_SCHEMA, without_headers

__all__ = [
    "NativeWalk",
    "binary_column",
    "decode_native",
    "header_structs",
    "headers_column",
    "times_native",
    "walk_native",
]


class NativeWalk(NamedTuple):
    """Records blocks (:func:`~seglake.record.batch_walk.batch_blocks`) the kernel walked."""

    lib: ctypes.CDLL
    walk: native.Walk
    data: np.ndarray
    start: np.ndarray
    end: np.ndarray
    counts: np.ndarray
    log_append: np.ndarray


def walk_native(
    lib: ctypes.CDLL,
    buf: bytes | bytearray | memoryview | list[Any],
    scan: BatchScan,
    sel: np.ndarray,
    path: str | None,
    limits: tuple[int, int | None],
    *,
    places: bool = False,
) -> NativeWalk | None:
    """Decompress (as the numpy walk does) and walk the records of the batches ``sel``
    of ``scan`` (``places``: each record's start and end too, :func:`native.walk`); None
    where the kernel refuses them."""
    data, _, start, end = batch_blocks(buf, scan, sel, path, limits)
    counts = scan.records_count[sel]
    log_append = (scan.attributes[sel] & TIMESTAMP_TYPE_BIT) != 0
    base_offset = scan.base_offset[sel]
    bases = (base_offset, scan.base_timestamp[sel], scan.max_timestamp[sel])
    last_delta = scan.last_offset[sel] - base_offset
    w = native.walk(lib, data, start, end, counts, bases, log_append, last_delta, places=places)
    return None if w is None else NativeWalk(lib, w, data, start, end, counts, log_append)


def decode_native(
    r: NativeWalk, scan: BatchScan, sel: np.ndarray, *, headers: bool = True
) -> pa.Table | None:
    """The walked records as :data:`RECORD_SCHEMA` (``sel``: their batches of ``scan``;
    without ``headers``: no headers column, and none of their bytes copied)."""
    w, counts = r.walk, r.counts
    g = native.gather(r.lib, r.data, r.start, r.end, w, headers=headers)
    column = _headers(w, g) if headers else None
    if headers and column is None:
        return None
    n = len(w.offset)
    columns = [
        pa.array(w.offset),
        pa.array(w.timestamp),
        pa.array(np.repeat(r.log_append.astype(np.int32), counts)),
        binary_column(n, w.key_off, w.key_valid, w.totals[5], g.key_data),
        binary_column(n, w.value_off, w.value_valid, w.totals[6], g.value_data),
        *([column] if headers else []),
        pa.array(np.repeat(scan.producer_id[sel], counts)),
        pa.array(np.repeat(scan.is_transactional[sel], counts)),
    ]
    schema = RECORD_SCHEMA if headers else without_headers(RECORD_SCHEMA)
    return pa.Table.from_arrays(columns, schema=schema)


def times_native(r: NativeWalk) -> tuple[np.ndarray, np.ndarray] | None:
    """``(offset, timestamp)`` of the walked records, every record checked as
    :func:`decode_native` checks it (header keys' UTF-8 too), or None."""
    w = r.walk
    if w.totals[2] and _headers(w, native.gather(r.lib, r.data, r.start, r.end, w)) is None:
        return None
    return w.offset, w.timestamp


def _headers(w: native.Walk, g: native.Gathered) -> pa.Array | None:
    """The headers column; None if a header key is not UTF-8."""
    return headers_column(
        w.header_off,
        (g.hkey_off, g.hkey_data),
        (g.hvalue_off, g.hvalue_valid, w.totals[7], g.hvalue_data),
        w.totals[2],
    )


def headers_column(
    list_off: np.ndarray,
    keys: tuple[np.ndarray, np.ndarray],
    values: tuple[np.ndarray, np.ndarray, int, np.ndarray],
    nh: int,
) -> pa.Array | None:
    """The headers column of ``len(list_off) - 1`` records from the kernel's buffers:
    list offsets, the ``nh`` header keys (offsets, data) and values (offsets, validity
    bits, nulls, data); None if a header key is not UTF-8."""
    try:
        structs = header_structs(
            binary_column(nh, keys[0], None, 0, keys[1]), binary_column(nh, *values)
        )
    except pa.ArrowInvalid:
        return None
    return pa.ListArray.from_arrays(pa.array(list_off), structs, type=HEADERS_TYPE)


def binary_column(
    n: int, offsets: np.ndarray, valid: np.ndarray | None, nulls: int, data: np.ndarray
) -> pa.Array:
    """A binary column of ``n`` values from the kernel's buffers: int32 offsets (at least
    ``n + 1``), validity bits (used only with ``nulls``), data."""
    bits = pa.py_buffer(valid) if nulls else None
    buffers = [bits, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def header_structs(
    keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray
) -> pa.StructArray:
    """``struct<key: string, value: binary>`` of header keys (binary, checked to be UTF-8:
    raises ``pa.ArrowInvalid``) and values."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return pa.StructArray.from_arrays([keys.cast(pa.string()), values], fields=list(HEADER_TYPE))
