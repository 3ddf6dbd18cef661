"""Zig-zag varints (protobuf style), scalar and vectorised with numpy.

A signed value v is zig-zagged to ``(v << 1) ^ (v >> 63)`` and written 7 bits at a time,
least significant group first, with the high bit set on every byte but the last.
Kafka's ``varint`` holds int32 (at most 5 bytes), ``varlong`` int64 (at most 10 bytes).
"""

from __future__ import annotations

import numpy as np

from seglake.errors import CorruptRecordError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10
_LE_U32 = np.dtype("<u4")
_U32_ONE = np.uint32(1)
_U32_STOP_BITS = np.uint32(0x80808080)
_U32_GROUPS = [np.uint32(0x7F << (7 * k)) for k in range(4)]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint bytes of ``value`` (int32 or int64)."""
    z = (value << 1) ^ (value >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def decode_varint(
    buf: bytes | memoryview, pos: int, max_bytes: int = MAX_VARLONG_BYTES
) -> tuple[int, int]:
    """``(value, next_pos)`` of the zig-zag varint at ``buf[pos]``.

    Raises :class:`CorruptRecordError` if it runs past the buffer or ``max_bytes``.
    """
    result, nxt = decode_unsigned_varint(buf, pos, max_bytes)
    return (result >> 1) ^ -(result & 1), nxt


def decode_unsigned_varint(
    buf: bytes | memoryview, pos: int, max_bytes: int = MAX_VARINT_BYTES
) -> tuple[int, int]:
    """``(value, next_pos)`` of the unsigned varint (no zig-zag: Kafka's protocol
    ``UNSIGNED_VARINT``, compact lengths and tag counts) at ``buf[pos]``.

    Raises :class:`CorruptRecordError` if it runs past the buffer or ``max_bytes``.
    """
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError(
                f"varint runs past the end of the buffer ({end} bytes)", position=pos
            )
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=pos)


def zigzag(values: np.ndarray) -> np.ndarray:
    """Zig-zag int64 values to uint64."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Encoded size in bytes (1..10) of each signed value, as int64."""
    z = zigzag(values)
    sizes = np.ones(len(z), dtype=np.int64)
    for k in range(1, MAX_VARLONG_BYTES):
        sizes += z >= np.uint64(1 << (7 * k))
    return sizes


def write_varints(
    out: np.ndarray, positions: np.ndarray, values: np.ndarray, sizes: np.ndarray | None = None
) -> np.ndarray:
    """Write the zig-zag varint of ``values[i]`` at ``out[positions[i]]`` (uint8 array).

    Returns the sizes written, so ``positions + sizes`` is where each varint ends.
    """
    z = zigzag(values)
    if sizes is None:
        sizes = varint_sizes(values)
    width = int(sizes.max()) if len(sizes) else 0
    for k in range(width):
        sel = sizes > k if k else slice(None)
        group = (z[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (sizes[sel] > k + 1).astype(np.uint64) << np.uint64(7)
        out[positions[sel] + k] = (group | more).astype(np.uint8)
    return sizes


def read_varints(
    buf: np.ndarray, positions: np.ndarray, max_bytes: int = MAX_VARLONG_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """Decode the zig-zag varint at each of ``positions`` in the uint8 array ``buf``.

    Returns ``(values int64, sizes int64)``. A varint that runs past ``buf`` or
    ``max_bytes`` raises :class:`CorruptRecordError` naming the first bad position.
    """
    n = len(positions)
    result = np.zeros(n, dtype=np.uint64)
    sizes = np.zeros(n, dtype=np.int64)
    active = np.arange(n)
    end = len(buf)
    for k in range(max_bytes):
        if not len(active):
            break
        pos = positions[active] + k
        over = pos >= end
        if over.any():
            bad = int(positions[active[over][0]])
            raise CorruptRecordError(
                f"varint runs past the end of the buffer ({end} bytes)", position=bad
            )
        b = buf[pos].astype(np.uint64)
        result[active] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
        done = b < 0x80
        sizes[active[done]] = k + 1
        active = active[~done]
    if len(active):
        raise CorruptRecordError(
            f"varint longer than {max_bytes} bytes", position=int(positions[active[0]])
        )
    values = (result >> np.uint64(1)).view(np.int64) ^ -(result & np.uint64(1)).view(np.int64)
    return values, sizes


def fast_varints(
    data: np.ndarray, pos: np.ndarray, max_bytes: int = MAX_VARLONG_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_varints` (same result and errors), about 3x faster for short varints.

    Varints of up to 4 bytes (values of up to 27 bits: lengths, deltas, counts) are decoded
    from one unaligned little-endian uint32 gathered at each position; the rest (longer
    ones, and those within 3 bytes of the end of ``data``) go to :func:`read_varints`.
    """
    span = len(data)
    if span < 4 or not len(pos) or max_bytes < 4:
        return read_varints(data, pos, max_bytes)
    words = np.ndarray((span - 3,), _LE_U32, buffer=data, strides=(1,))
    w = words[np.minimum(pos, span - 4)]
    stop = ~w & _U32_STOP_BITS
    first = stop & (~stop + _U32_ONE)  # 0x80 << 8 * (size - 1): the last byte's clear high bit
    w &= (first << _U32_ONE) - _U32_ONE
    z = w & _U32_GROUPS[0]
    for k in range(1, 4):
        z |= (w >> np.uint32(k)) & _U32_GROUPS[k]
    values = ((z >> _U32_ONE) ^ (np.uint32(0) - (z & _U32_ONE))).view(np.int32).astype(np.int64)
    sizes = ((np.bitwise_count(first - _U32_ONE) + 1) >> 3).astype(np.int64)
    slow = np.flatnonzero((first == 0) | (pos > span - 4))
    if len(slow):
        values[slow], sizes[slow] = read_varints(data, pos[slow], max_bytes)
    return values, sizes
