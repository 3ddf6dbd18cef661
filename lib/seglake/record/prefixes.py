"""The numpy/Arrow assembly of :func:`seglake.record.encode.encode_batches` (the path
without the compiled kernel): record prefixes, for each record
``[batch header][length][attributes=0][timestampDelta][offsetDelta][keyLength]`` as one
element of an Arrow binary array (the batch header, 61 bytes, only on a batch's first
record), joined row by row with the keys, values and headers (:func:`join_records`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.format import INT32_MAX
from seglake.record.batch import HEADER_SIZE
from seglake.record.encode_input import EncodedHeaders, cast_binary
from seglake.record.plan import RelVarints
from seglake.record.varint import zigzag
from seglake.record.varint_columns import (
    POW256,
    U32,
    U64,
    data_of,
    from_numpy,
    join_binary,
    pack_varints,
    varint_array,
    varint_word,
    vsize_z,
)

__all__ = ["join_records", "prefix_array"]

_SHR64 = np.array([64 - 8 * k if k else 0 for k in range(8)], dtype=U64)


def _inline_prefixes(
    rel: RelVarints,
    z_key: np.ndarray,
    s_key: np.ndarray,
    s_head: np.ndarray,
    length: np.ndarray,
    views: np.ndarray,
) -> None:
    """Fill ``views`` (``(n, 2)`` uint64: binary_view structs) with inline prefixes of at
    most 12 bytes: ``head`` = length + attributes + timestampDelta (<= 7 bytes) and
    ``tail`` = offsetDelta + keyLength (<= 8 bytes), little-endian."""
    word = varint_word(rel.z_len, rel.s_len, int(rel.s_len.max())).astype(U64)
    w_ts = varint_word(rel.z_ts, rel.s_ts, int(rel.s_ts.max())).astype(U64)
    word |= w_ts * POW256[(rel.s_len + 1).astype(np.intp)]
    tail = varint_word(rel.z_off, rel.s_off, int(rel.s_off.max())).astype(U64)
    w_key = varint_word(z_key, s_key, int(s_key.max())).astype(U64)
    tail |= w_key * POW256[rel.s_off.astype(np.intp)]
    head_bytes = s_head.astype(np.intp)
    lo = word | tail * POW256[head_bytes]  # prefix bytes 0..7 (tail bytes past 8 drop)
    views[:, 0] = length.astype(U64) | (lo << np.uint64(32))
    lo >>= np.uint64(32)  # prefix bytes 4..7
    if int(length.max()) > 8:  # bytes 8..11: the part of the tail past byte 8
        lo |= (tail >> _SHR64[head_bytes]) << np.uint64(32)
    views[:, 1] = lo


def prefix_array(
    pieces: list[RelVarints],
    z_key: np.ndarray,
    s_key: np.ndarray,
    starts: np.ndarray,
    headers: np.ndarray,
    btype: pa.DataType,
) -> tuple[pa.Array, bool]:
    """Element ``i``: ``[batch header][length][attributes=0][timestampDelta][offsetDelta]
    [keyLength]``, the batch header (``headers[b]``, 61 bytes) only on the first record of
    batch ``b``. ``pieces``: the records' :class:`RelVarints`, in order. Returns ``(array,
    whether the batch headers are in it)``.

    Fast path (prefixes of <= 12 bytes whose length + attributes + timestampDelta take
    <= 7 and offsetDelta + keyLength <= 8, i.e. nearly always): the varints are combined
    into little-endian words (a shift by ``8 * bytes before it`` is a multiplication by
    ``256 ** bytes``) and handed to Arrow as binary_view values, inline (up to 12 bytes)
    or, for a batch's first record, pointing at its header followed by its prefix; Arrow's
    cast to binary gathers them. Otherwise the general :func:`pack_varints`, without headers.
    """
    n = len(z_key)
    s_head = np.concatenate([p.s_len + p.s_ts for p in pieces]) + 1  # length .. tsDelta
    s_tail = np.concatenate([p.s_off for p in pieces]) + s_key  # offsetDelta, keyLength
    length = s_head + s_tail
    fast = int(s_head.max()) <= 7 and int(s_tail.max()) <= 8 and int(length.max()) <= 12
    if fast and 80 * len(starts) <= INT32_MAX:  # binary_view offsets are int32
        views = np.empty((n, 2), dtype=U64)  # binary_view: length int32, 12 inline bytes
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
        first = views.view(U32).reshape(n, 4)
        first[starts, 0] = length[starts].astype(U32) + HEADER_SIZE
        first[starts, 1] = headers[:, :4].copy().view(U32)[:, 0]  # 4-byte prefix
        first[starts, 2] = 0  # buffer index
        first[starts, 3] = np.arange(0, 80 * nb, 80, dtype=U32)  # offset in the buffer
        arr = pa.Array.from_buffers(
            pa.binary_view(), n, [None, pa.py_buffer(views), pa.py_buffer(side)], null_count=0
        )
        return arr.cast(btype), True
    rel = RelVarints.concat(pieces)
    data, lengths = pack_varints(
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
    return from_numpy(btype, offsets, data), False


def join_records(
    pieces: list[RelVarints],
    key_varints: tuple[np.ndarray, np.ndarray],
    value_varints: tuple[np.ndarray, np.ndarray],
    key: pa.ChunkedArray,
    value: pa.ChunkedArray,
    headers: EncodedHeaders | None,
    starts: np.ndarray,
    batch_headers: np.ndarray,
    btype: pa.DataType,
    total: int,
) -> np.ndarray:
    """The ``total`` bytes of the batches (writable): each record's parts joined row by row
    by Arrow's ``binary_join_element_wise``, the batch headers (``(nb, 61)`` uint8) in the
    first record's prefix. ``key_varints``/``value_varints``: zig-zagged lengths, sizes."""
    (zk, vk), (zv, vv) = key_varints, value_varints
    n = len(zk)
    prefix, with_headers = prefix_array(pieces, zk, vk, starts, batch_headers, btype)
    parts = [
        prefix,
        cast_binary(key, btype),
        varint_array(zv, vv, btype),
        cast_binary(value, btype),
    ]
    if not with_headers:
        header_off = np.zeros(n + 1, dtype=np.int64)
        header_off[starts + 1] = HEADER_SIZE
        np.cumsum(header_off, out=header_off)
        parts.insert(0, from_numpy(btype, header_off, batch_headers.reshape(-1)))
    if headers is None:
        parts.append(
            from_numpy(btype, np.arange(n + 1, dtype=np.int64), np.zeros(n, dtype=np.uint8))
        )
    else:
        zc = zigzag(headers.count)
        parts += [varint_array(zc, vsize_z(zc), btype), headers.joined]
    buf, first = data_of(join_binary(parts, btype))
    data = np.frombuffer(buf, dtype=np.uint8, count=total, offset=first)
    return data if data.flags.writeable else data.copy()
