"""LZ4 frames decompressed block by block (cramjam's block decoder), the fast path of
:class:`~seglake.record.codecs.Inflater` for Kafka's lz4 records blocks.

cramjam's frame decoder costs 30-70 µs per frame whatever its size (a Kafka batch of a
few KiB); its block decoder a few µs. A frame (LZ4 frame format, as Kafka's
``KafkaLZ4BlockOutputStream`` and librdkafka write it)::

    magic 04 22 4D 18 | FLG | BD | [content size: 8] | HC
    blocks: uint32 LE size (bit 31: stored uncompressed; 0: end mark) | data
            | [uint32 block checksum]
    [uint32 content checksum]

    FLG: version (bits 7-6) 01, block independence (5), block checksum (4),
         content size (3), content checksum (2), reserved (1), dictionary id (0)
    BD:  block max size (bits 6-4): 4 64 KiB, 5 256 KiB, 6 1 MiB, 7 4 MiB

Only the plain case is taken here: one frame, no dictionary, blocks independent (or a
single block), every block fitting its declared maximum and the limit. Anything else,
and any error, returns ``None`` and the caller decompresses the frame the usual way
(whose errors name the problem). The xxHash32 checksums are not verified: the batch's
CRC-32C covers these bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import cramjam
import numpy as np

__all__ = ["inflate_frame"]

_MAGIC = b"\x04\x22\x4d\x18"
_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def inflate_frame(
    data: bytes | memoryview, room: Callable[[int], np.ndarray], limit: int
) -> int | None:
    """Decompress the frame ``data`` into ``room(n)`` (the first ``n`` free bytes of the
    caller's buffer, which may move between calls); returns the bytes written, or
    ``None`` when this path does not take the frame (see the module)."""
    v = memoryview(data).cast("B")
    n = len(v)
    if n < 7 or v[:4] != _MAGIC:
        return None
    flg, bd = v[4], v[5]
    block_max = _BLOCK_MAX.get((bd >> 4) & 7)
    if flg >> 6 != 1 or flg & 0b11 or block_max is None:
        return None
    linked, block_sum = not flg & 0x20, 4 if flg & 0x10 else 0
    pos = 7 + (8 if flg & 0x08 else 0)
    blocks: list[tuple[int, int, int]] = []
    while True:  # the blocks: (position, size, stored uncompressed)
        if pos + 4 > n:
            return None
        size = int.from_bytes(v[pos : pos + 4], "little")
        pos += 4
        if size == 0:
            break
        stored, size = size >> 31, size & 0x7FFFFFFF
        if pos + size + block_sum > n or size > block_max or (linked and blocks):
            return None
        blocks.append((pos, size, stored))
        pos += size + block_sum
    if pos + (4 if flg & 0x04 else 0) != n:
        return None
    # room for every block at its most, once (the buffer may move when it grows)
    out = room(min(limit, sum(size if stored else block_max for _, size, stored in blocks)))
    total = 0
    try:
        for pos, size, stored in blocks:
            if stored:
                if total + size > len(out):
                    return None
                out[total : total + size] = np.frombuffer(v[pos : pos + size], dtype=np.uint8)
                total += size
            else:
                total += cramjam.lz4.decompress_block_into(
                    v[pos : pos + size],
                    memoryview(out[total:]),  # type: ignore[arg-type]
                )
    except Exception:  # cramjam's DecompressionError (or a full buffer): the usual path
        return None
    return total
