"""Kafka's default partitioner, vectorised: ``toPositive(murmur2(key)) % numPartitions``.

murmur2 is Kafka's ``Utils.murmur2`` (seed 0x9747b28c, m 0x5bd1e995, r 24) over the key
bytes, 4-byte little-endian blocks, computed for all keys at once with uint32 numpy
arithmetic (wrap-around multiplication is what Java's int does). Null keys get no hash;
the caller spreads them (round robin).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)


def murmur2(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Kafka's murmur2 of each key as int32 (null keys give 0)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if not pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + n + 1]
    data_buf = keys.buffers()[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1].astype(np.int64)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int64)
    with np.errstate(over="ignore"):
        h = _SEED ^ lengths.astype(np.uint32)
        blocks = lengths // 4
        for i in range(int(blocks.max()) if n else 0):
            sel = np.nonzero(blocks > i)[0]
            p = starts[sel] + 4 * i
            k = (
                data[p].astype(np.uint32)
                | (data[p + 1].astype(np.uint32) << 8)
                | (data[p + 2].astype(np.uint32) << 16)
                | (data[p + 3].astype(np.uint32) << 24)
            )
            k *= _M
            k ^= k >> np.uint32(24)
            k *= _M
            h[sel] = (h[sel] * _M) ^ k
        tail = lengths % 4
        base = starts + (lengths & ~3)
        for j in (2, 1, 0):
            sel = np.nonzero(tail > j)[0]
            h[sel] ^= data[base[sel] + j].astype(np.uint32) << np.uint32(8 * j)
        sel = np.nonzero(tail > 0)[0]
        h[sel] *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    out = h.view(np.int32).copy()
    if keys.null_count:
        out[np.asarray(keys.is_null())] = 0
    return out


def default_partition(
    keys: pa.Array | pa.ChunkedArray, num_partitions: int, *, null_start: int = 0
) -> np.ndarray:
    """Partition of each record, as Kafka's producer picks it for a keyed record.

    Keyed: ``(murmur2(key) & 0x7fffffff) % num_partitions``. Null keys are spread round
    robin starting at ``null_start`` (Kafka's producer would stick to one partition per
    batch; round robin gives the same spread, deterministically).
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    part = (murmur2(keys).astype(np.int64) & 0x7FFFFFFF) % num_partitions
    if keys.null_count:
        nulls = np.nonzero(np.asarray(keys.is_null()))[0]
        part[nulls] = (null_start + np.arange(len(nulls))) % num_partitions
    return part.astype(np.int32)
