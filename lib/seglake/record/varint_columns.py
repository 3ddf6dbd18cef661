"""Varints of whole columns with numpy, and Arrow binary arrays over numpy buffers.

A varint's bytes (:func:`seglake.record.varint.write_varints`) are built as whole-column
little-endian words: 7-bit group ``k`` of the zig-zagged value moves to byte ``k`` and the
continuation bits (0x80 on all but the last byte) are or-ed in; shifting by ``8 * k``
bytes is multiplying by ``256 ** k``. No scatter per byte.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglake.record.varint import MAX_VARLONG_BYTES, zigzag

__all__ = [
    "POW256",
    "U32",
    "U64",
    "data_of",
    "from_numpy",
    "join_binary",
    "pack_varints",
    "varint_array",
    "varint_word",
    "vsize",
    "vsize_z",
]

U16, U32, U64 = np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8")
# continuation bits (0x80 on all but the last byte) of an s-byte varint, little-endian word
_CONT64 = np.array(
    [0] + [int.from_bytes(b"\x80" * (s - 1), "little") for s in range(1, 9)], dtype=U64
)
_CONT32 = _CONT64[:5].astype(U32)
POW256 = np.array([1 << (8 * k) for k in range(8)], dtype=U64)  # x << 8k == x * 256**k


def vsize_z(z: np.ndarray) -> np.ndarray:
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


def vsize(values: np.ndarray) -> np.ndarray:
    return vsize_z(zigzag(values))


def varint_word(z: np.ndarray, s: np.ndarray, width: int) -> np.ndarray:
    """Little-endian word (uint16/32/64 for ``width`` <= 2/4/8 bytes) whose
    low ``s[i]`` bytes are the varint of the zig-zagged ``z[i]``; higher bytes are 0."""
    dt: Any  # U16, U32 or U64 (numpy stubs cannot mix their scalar types)
    cont: np.ndarray
    if width <= 2:
        dt, cont = U16, _CONT32  # (cont unused below 4 bytes)
    else:
        dt, cont = (U32, _CONT32) if width <= 4 else (U64, _CONT64)
    zz = z.astype(dt)
    word = zz & dt.type(0x7F)
    for k in range(1, width):  # 7-bit group k moves to byte k
        word |= (zz << dt.type(k)) & dt.type(0x7F << (8 * k))
    if width <= 3:  # continuation bits: a compare per byte beats a table lookup
        for k in range(width - 1):
            word |= (s > k + 1).astype(dt) << dt.type(8 * k + 7)
    else:
        word |= cont[s.astype(np.intp)]
    return cast(np.ndarray, word)


def _varint_matrix(z: np.ndarray, s: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` uint8: row ``i`` starts with the varint of the zig-zagged ``z[i]``
    (``s[i]`` bytes), zeros after. Whole-column numpy ops, no scatter."""
    n = len(z)
    if width == 1:  # values < 64 (zig-zagged < 128): the byte is the value
        return z.astype(np.uint8).reshape(n, 1)
    if width <= 8:
        word = varint_word(z, s, width)
        return word.view(np.uint8).reshape(n, word.itemsize)[:, :width]
    out = np.empty((n, width), dtype=np.uint8)  # varlongs of 9-10 bytes: byte by byte
    for k in range(width):
        group = (z >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[:, k] = group | ((s > k + 1).astype(np.uint64) << np.uint64(7))
    return out


def pack_varints(
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


def varint_array(z: np.ndarray, sizes: np.ndarray, btype: pa.DataType) -> pa.Array:
    """Arrow binary array whose element ``i`` is the varint of the zig-zagged ``z[i]``."""
    n = len(z)
    if not n:
        return pa.array([], btype)
    width = int(sizes.max())
    if int(sizes.min()) == width:  # all the same size: the matrix is the data
        data = np.ascontiguousarray(_varint_matrix(z, sizes, width)).reshape(-1)
        odt = np.int64 if pa.types.is_large_binary(btype) else np.int32
        return from_numpy(btype, np.arange(0, (n + 1) * width, width, dtype=odt), data)
    views = np.zeros((n, 16), dtype=np.uint8)
    views[:, 0] = sizes  # length (int32 LE, < 256)
    views[:, 4 : 4 + width] = _varint_matrix(z, sizes, width)
    return _inline_array(views, btype)


def from_numpy(btype: pa.DataType, offsets: np.ndarray, data: np.ndarray | pa.Buffer) -> pa.Array:
    odt = np.int64 if pa.types.is_large_binary(btype) else np.int32
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(
        btype,
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(odt, copy=False)), buf],
        null_count=0,
    )


def data_of(arr: pa.Array) -> tuple[pa.Buffer, int]:
    """Data buffer of a (large) binary array and where element 0 starts in it."""
    odt = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=odt, count=arr.offset + 1)
    return arr.buffers()[2], int(offsets[arr.offset])


def join_binary(parts: list[pa.Array], btype: pa.DataType) -> pa.Array:
    return pc.binary_join_element_wise(*parts, pa.scalar(b"", btype), null_handling="skip")
