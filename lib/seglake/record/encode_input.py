"""The input table of :func:`seglake.record.encode.encode_batches`, checked and converted:
int64 offsets and timestamps, binary keys and values (lengths, -1 for null), and the
headers encoded as ``[keyLength key valueLength value]*`` per record.

Errors are :class:`~seglake.errors.InputSchemaError` /
:class:`~seglake.errors.OffsetOrderError` naming the row (and header).
"""

from __future__ import annotations

import dataclasses
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.errors import InputSchemaError, OffsetOrderError
from seglake.format import MAX_OFFSET
from seglake.record.schema import MAX_TIMESTAMP_MS, timestamp_millis
from seglake.record.varint import zigzag
from seglake.record.varint_columns import data_of, from_numpy, join_binary, varint_array, vsize_z

__all__ = [
    "EncodedHeaders",
    "binary_lengths",
    "bytes_column",
    "cast_binary",
    "check_offsets",
    "check_timestamps",
    "first_not_increasing",
    "headers_column",
    "int64_column",
    "offset_too_high",
    "prepare_headers",
]


@dataclasses.dataclass
class EncodedHeaders:
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


def int64_column(records: pa.Table | pa.RecordBatch, name: str) -> np.ndarray:
    col = _column(records, name)
    if col is None:
        raise InputSchemaError(f"input has no {name!r} column (columns: {records.schema.names})")
    t = col.type
    if pa.types.is_timestamp(t) and name == "timestamp":
        col = pa.chunked_array([timestamp_millis(col)])  # floor, as everywhere
    elif pa.types.is_integer(t):
        try:
            col = col.cast(pa.int64())
        except pa.ArrowInvalid as exc:
            raise InputSchemaError(f"column {name!r} ({t}) does not fit int64: {exc}") from None
    else:
        raise InputSchemaError(f"column {name!r} has type {t}; expected an integer type")
    if col.null_count:
        raise InputSchemaError(f"row {_first_null(col)}: {name} is null")
    return cast(np.ndarray, _single(col).to_numpy().astype(np.int64, copy=False))


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
        or pa.types.is_null(t)
    )


def bytes_column(records: pa.Table | pa.RecordBatch, name: str, n: int) -> pa.ChunkedArray:
    col = _column(records, name)
    if col is None:
        return pa.chunked_array([pa.nulls(n, pa.binary())])
    if not _is_binary_like(col.type):
        raise InputSchemaError(f"column {name!r} has type {col.type}; expected binary")
    if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        col = col.cast(pa.large_binary() if _is_large(col.type) else pa.binary())
    return col


def _is_large(t: pa.DataType) -> bool:
    return bool(pa.types.is_large_binary(t) or pa.types.is_large_string(t))


def binary_lengths(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Byte length of each value, -1 for null, int64."""
    lens = pc.binary_length(col).fill_null(-1)
    if isinstance(lens, pa.ChunkedArray):
        lens = _single(lens)
    return cast(np.ndarray, lens.to_numpy().astype(np.int64, copy=False))


def cast_binary(col: pa.ChunkedArray | pa.Array, btype: pa.DataType) -> pa.Array:
    if col.type != btype:
        col = col.cast(btype)
    return _single(col) if isinstance(col, pa.ChunkedArray) else col


def headers_column(
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


def prepare_headers(col: pa.ChunkedArray, counts: np.ndarray, btype: pa.DataType) -> EncodedHeaders:
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
    keys, values = cast_binary(keys, btype), cast_binary(values, btype)
    klen, vlen = binary_lengths(keys), binary_lengths(values)
    zk, zv = zigzag(klen), zigzag(vlen)
    vk, vv = vsize_z(zk), vsize_z(zv)
    entries = join_binary(
        [varint_array(zk, vk, btype), keys, varint_array(zv, vv, btype), values], btype
    )
    entry_cum = np.zeros(len(klen) + 1, dtype=np.int64)
    np.cumsum(vk + klen + vv + np.maximum(vlen, 0), out=entry_cum[1:])
    data, start = data_of(entries)
    per_record = entry_cum[first]
    joined = from_numpy(btype, per_record, data.slice(start))
    return EncodedHeaders(counts, np.diff(per_record), joined)


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


def first_not_increasing(a: np.ndarray) -> int | None:
    """Index of the first element not greater than the one before it (``None``: ``a``
    is strictly increasing)."""
    bad = np.flatnonzero(a[1:] <= a[:-1])
    return int(bad[0]) + 1 if len(bad) else None


def check_offsets(off: np.ndarray) -> None:
    """Offsets from 0 to :data:`MAX_OFFSET`, strictly increasing; else an
    :class:`OffsetOrderError` naming the first row that is not."""
    if off[0] < 0:
        raise OffsetOrderError(f"row 0: offset {int(off[0])} is negative")
    i = first_not_increasing(off)
    if i is not None:
        raise OffsetOrderError(
            f"row {i}: offset {int(off[i])} is not greater than offset {int(off[i - 1])} of "
            f"row {i - 1}; offsets must be strictly increasing"
        )
    if off[-1] > MAX_OFFSET:
        i = int(np.searchsorted(off, MAX_OFFSET, side="right"))
        raise OffsetOrderError(offset_too_high(f"row {i}: offset", int(off[i])))


def offset_too_high(what: str, offset: int) -> str:
    """The one line of a record offset above :data:`MAX_OFFSET` (``what``: which)."""
    return (
        f"{what} {offset} is above {MAX_OFFSET} (2^63 - 2): the log end offset after it "
        "would not fit a long (Kafka's offsets end there)"
    )


def check_timestamps(ts: np.ndarray) -> None:
    """Kafka's producer refuses negative timestamps (``ProducerRecord``), and -1 is a
    batch's "no timestamp": a negative one would read back as missing. Past
    ``MAX_TIMESTAMP_MS`` (year 294247) no reader's microsecond timestamp holds it."""
    bad = np.flatnonzero((ts < 0) | (ts > MAX_TIMESTAMP_MS))
    if len(bad):
        i = int(bad[0])
        why = (
            "Kafka refuses timestamps before 1970-01-01 (epoch ms < 0)"
            if ts[i] < 0
            else f"past {MAX_TIMESTAMP_MS} (year 294247) a Kafka source timestamp overflows"
        )
        raise InputSchemaError(
            f"row {i}: timestamp {int(ts[i])} is out of range ({len(bad)} such row(s)): {why}"
        )
