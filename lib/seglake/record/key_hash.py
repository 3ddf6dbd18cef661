"""XXH64 (seed 0) of every value of an Arrow binary column: the key index's hash.

XXH64 is xxHash's 64-bit hash as its specification (``xxhash_spec.md``, XXH64) defines
it, the hash Parquet's split-block bloom filters take (``BloomFilter.md``: XXH64, seed 0,
of a ``BYTE_ARRAY``'s bytes without their length). :func:`key_hashes` runs the compiled
kernel (``sl_xxh64``, :mod:`seglake.record.native`) when it is loaded, else the numpy code
below: the same hashes (tests compare both with each other and with known vectors).

The numpy path is vectorised over the values: one step per 32-byte stripe of the longest
value (none for keys under 32 bytes), then at most seven masked steps for the tails
(8, 8, 8, 4, 1, 1, 1 bytes); numpy's uint64 arithmetic wraps as C's does.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from seglake.record import native

__all__ = ["key_hashes", "xxh64"]

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_V1 = np.uint64((int(_P1) + int(_P2)) % 2**64)  # the stripe accumulators' seeds (seed 0)
_V4 = np.uint64(-int(_P1) % 2**64)


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``(hashes, valid)`` of a binary/large_binary (or string) column: XXH64 of each
    value's bytes as uint64, and a bool mask of the non-null values (a null's hash is
    that of ``b""`` and means nothing)."""
    if isinstance(keys, pa.ChunkedArray):
        parts = [key_hashes(c) for c in keys.chunks]
        if not parts:
            return np.zeros(0, np.uint64), np.zeros(0, bool)
        return np.concatenate([h for h, _ in parts]), np.concatenate([v for _, v in parts])
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.view(pa.large_binary() if pa.types.is_large_string(keys.type) else pa.binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        raise TypeError(f"key hashes take a binary column, got {keys.type}")
    n = len(keys)
    valid = (
        np.ones(n, bool)
        if keys.null_count == 0
        else np.asarray(keys.is_valid().to_numpy(zero_copy_only=False), bool)
    )
    wide = pa.types.is_large_binary(keys.type)
    dtype = np.int64 if wide else np.int32
    bufs = keys.buffers()
    offsets = np.frombuffer(bufs[1], dtype)[keys.offset : keys.offset + n + 1]
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    lib = native.kernel()
    if lib is not None and n:
        out = np.empty(n, np.uint64)
        offsets = np.ascontiguousarray(offsets)
        addresses = (native.address(a) for a in (offsets, data, out))
        lib.sl_xxh64(n, next(addresses), int(wide), *addresses)
        return out, valid
    return xxh64(data, offsets.astype(np.int64)), valid


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def xxh64(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """XXH64, seed 0, of ``data[offsets[i]:offsets[i + 1]]`` for each ``i`` (numpy)."""
    start = np.asarray(offsets[:-1], np.int64)
    length = np.asarray(offsets[1:], np.int64) - start
    n = len(start)
    if n == 0:
        return np.zeros(0, np.uint64)
    # 8 zero bytes of padding: a lane may read past a value (masked out after); the
    # unaligned little-endian words at every byte: strided views of the padded bytes
    buf = np.zeros(len(data) + 8, np.uint8)
    buf[: len(data)] = data
    u64 = np.ndarray((len(data) + 1,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
    u32 = np.ndarray((len(data) + 1,), dtype="<u4", buffer=buf, offset=0, strides=(1,))

    def read(pos: np.ndarray, width: int) -> np.ndarray:
        word: np.ndarray = u64[pos] if width == 8 else u32[pos].astype(np.uint64)
        return word

    h = np.full(n, _P5, np.uint64)
    stripes = length // 32
    long_ = np.flatnonzero(stripes > 0)
    if len(long_):
        v = [
            np.full(len(long_), _V1, np.uint64),
            np.full(len(long_), _P2, np.uint64),
            np.zeros(len(long_), np.uint64),
            np.full(len(long_), _V4, np.uint64),
        ]
        s_long = stripes[long_]
        for k in range(int(s_long.max())):
            live = s_long > k
            pos = start[long_] + 32 * k
            for lane in range(4):
                lanes = read(pos + 8 * lane, 8)
                v[lane] = np.where(live, _round(v[lane], lanes), v[lane])
        acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        for lane in range(4):
            acc = (acc ^ _round(np.zeros_like(acc), v[lane])) * _P1 + _P4
        h[long_] = acc
    h += length.astype(np.uint64)
    pos = start + 32 * stripes
    left = length - 32 * stripes
    for _ in range(3):
        take = left >= 8
        lanes = read(pos, 8)
        mixed = _rotl(h ^ _round(np.zeros_like(h), lanes), 27) * _P1 + _P4
        h = np.where(take, mixed, h)
        pos, left = pos + 8 * take, left - 8 * take
    take = left >= 4
    mixed = _rotl(h ^ (read(pos, 4) * _P1), 23) * _P2 + _P3
    h = np.where(take, mixed, h)
    pos, left = pos + 4 * take, left - 4 * take
    for _ in range(3):
        take = left >= 1
        mixed = _rotl(h ^ (buf[pos].astype(np.uint64) * _P5), 11) * _P1
        h = np.where(take, mixed, h)
        pos, left = pos + take, left - take
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h
