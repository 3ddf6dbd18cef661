"""Split-block bloom filter (SBBF) over 64-bit key hashes: the key index's filter level.

The filter is Parquet's, as ``parquet-format``'s ``BloomFilter.md`` specifies it, so its
bytes are a documented format: ``z`` blocks of 256 bits, each eight little-endian uint32
words. A hash ``h`` (XXH64, seed 0, of the key's bytes: :mod:`seglake.record.key_hash`)
selects block ``((h >> 32) * z) >> 32`` and, in it, one bit per word from its low 32 bits
``x``: bit ``(x * SALT[i]) >> 27`` (uint32 product) of word ``i``. Insert sets the eight
bits; a check is "maybe present" when all eight are set (never a false negative).

Sizing (:func:`filter_bytes`): Parquet's ``optimalNumOfBits``, ``-8 n / ln(1 - p^(1/8))``
bits for ``n`` distinct hashes at false-positive rate ``p``, rounded up to a power of two
blocks, between :data:`MIN_BYTES` and :data:`MAX_BYTES`. A power of two blocks can be
**folded** (:meth:`KeyFilter.folded`): blocks ``2j`` and ``2j + 1`` OR-ed into block ``j``
are exactly the filter of ``z / 2`` blocks (``((h >> 32) * z/2) >> 32`` is the former
index halved), so a driver broadcasting many segments' filters shrinks each to its share
(:data:`BROADCAST_BYTES` / segments) at a higher false-positive rate, never a false
negative.
"""

from __future__ import annotations

import math

import numpy as np

from seglake.record import native

__all__ = [
    "BROADCAST_BYTES",
    "MAX_BYTES",
    "MIN_BYTES",
    "TARGET_FPP",
    "KeyFilter",
    "filter_bytes",
]

SALT = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    np.uint32,
)
BLOCK_BYTES = 32
MIN_BYTES = 32  # one block
MAX_BYTES = 128 * 1024  # the file's cap: 1% up to ~110k distinct keys a segment
TARGET_FPP = 0.01
BROADCAST_BYTES = 64 * 1024 * 1024  # the driver's budget for all segments' filters


def filter_bytes(distinct: int, fpp: float = TARGET_FPP, max_bytes: int = MAX_BYTES) -> int:
    """The filter size for ``distinct`` hashes at ``fpp`` (a power of two blocks,
    ``MIN_BYTES .. max_bytes``; ``max_bytes`` rounded down to a power of two blocks)."""
    if distinct <= 0:
        return MIN_BYTES
    bits = -8.0 * distinct / math.log(1.0 - fpp ** (1.0 / 8.0))
    blocks = 1 << max(0, math.ceil(math.log2(max(bits / 256.0, 1.0))))
    cap = 1 << max(0, (max(max_bytes, MIN_BYTES) // BLOCK_BYTES).bit_length() - 1)
    return min(blocks, cap) * BLOCK_BYTES


def _bits(hashes: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Each hash's block and its eight words' bit masks, ``(n,)`` and ``(n, 8)``."""
    h = np.asarray(hashes, np.uint64)
    block = ((h >> np.uint64(32)) * np.uint64(blocks)) >> np.uint64(32)
    x = (h & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    shift = (x[:, None] * SALT[None, :]) >> np.uint32(27)
    return block.astype(np.int64), (np.uint32(1) << shift).astype(np.uint32)


class KeyFilter:
    """An SBBF: ``words`` is ``(blocks, 8)`` uint32 (``to_bytes``: little-endian)."""

    def __init__(self, words: np.ndarray) -> None:
        self.words = words

    @classmethod
    def build(cls, hashes: np.ndarray, nbytes: int) -> KeyFilter:
        """The filter of ``nbytes`` (a multiple of 32) holding ``hashes``: each hash's
        eight bits set in one array of bits (bit ``j`` of word ``i`` of block ``b`` at
        ``256 b + 32 i + j``), packed little-endian into the words."""
        blocks = nbytes // BLOCK_BYTES
        lib = native.kernel()
        if lib is not None:  # sl_sbbf: the same bits in one C loop
            out = np.zeros((blocks, 8), np.uint32)
            h = np.ascontiguousarray(hashes, np.uint64)
            if len(h):
                lib.sl_sbbf(len(h), native.address(h), blocks, native.address(out))
            return cls(out)
        bits = np.zeros(blocks * 256, bool)
        if len(hashes):
            h = np.asarray(hashes, np.uint64)
            at = (((h >> np.uint64(32)) * np.uint64(blocks)) >> np.uint64(32)).astype(np.int64)
            at *= 256
            x = h.astype(np.uint32)  # the low 32 bits
            for i in range(8):
                bits[at + (32 * i + ((x * SALT[i]) >> np.uint32(27)))] = True
        words = np.packbits(bits, bitorder="little").view("<u4").astype(np.uint32)
        return cls(words.reshape(blocks, 8))

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> KeyFilter:
        return cls(np.frombuffer(data, "<u4").astype(np.uint32).reshape(-1, 8))

    def to_bytes(self) -> bytes:
        return self.words.astype("<u4").tobytes()

    @property
    def nbytes(self) -> int:
        return int(self.words.size) * 4

    def may_contain(self, hashes: np.ndarray) -> np.ndarray:
        """Per hash: maybe present (``True``) or certainly absent (``False``)."""
        if not len(hashes):
            return np.zeros(0, bool)
        block, masks = _bits(hashes, len(self.words))
        hit: np.ndarray = np.all((self.words[block] & masks) == masks, axis=1)
        return hit

    def folded(self, max_bytes: int) -> KeyFilter:
        """This filter halved (pairs of blocks OR-ed) until it takes at most ``max_bytes``
        (at least one block): no false negatives, more false positives. Only a power of
        two blocks folds exactly; another count is returned unchanged."""
        words = self.words
        blocks = len(words)
        if blocks & (blocks - 1):
            return self
        while len(words) > 1 and len(words) * BLOCK_BYTES > max_bytes:
            words = words[0::2] | words[1::2]
        return self if words is self.words else KeyFilter(words)
