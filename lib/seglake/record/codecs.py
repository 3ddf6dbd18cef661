"""Compression codecs of RecordBatch v2, as Kafka's Java client frames them.

    id  name    frame
    0   none
    1   gzip    gzip stream (RFC 1952; several members are read back to back)
    2   snappy  xerial framing: b"\\x82SNAPPY\\x00" + int32 version(1) + int32 compat(1),
                then blocks of int32 length + raw snappy; raw (unframed) snappy is accepted too
    3   lz4     LZ4 frame format, blocks independent (Kafka's Java reader refuses linked
                blocks): written as Kafka's producer writes it (``lz4_write.py``)
    4   zstd    zstd frame

Implemented on ``cramjam`` (Rust, no system libraries); lz4 is compressed with
python-lz4 (the reference C library, as lz4-java's compressors bind it).

Decompression is bounded: cramjam's ``*_into`` functions stream the output into a buffer
of at most ``limit + 1`` bytes and stop when it is full, so a block that inflates past
the limit (a decompression bomb, a forged length) costs at most that much memory and the
time to produce it, and is refused with :class:`OutputLimitError`.
Raw snappy states its length up front and is checked before anything is allocated. The
default limit of a block is :func:`inflate_budget` of its size, at most
:data:`MAX_BLOCK_OUTPUT`.

A read inflates its blocks in groups (:func:`inflate_groups`): at most
:data:`READ_INFLATE_BUDGET` bytes a group (one block alone may take its own budget), each
group decoded before the next is inflated, so a read's memory is what it returns plus
that budget, however many blocks it holds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam
import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError
from seglake.record.lz4_frame import inflate_frame
from seglake.record.lz4_write import DEFAULT_LEVEL, compress_frame

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024
MAX_RATIO = 256  # compressed bytes may inflate to 256x their size ...
MIN_BUDGET = 16 << 20  # ... or to 16 MiB, whichever is more ...
MAX_BLOCK_OUTPUT = 1 << 30  # ... and one records block never beyond 1 GiB
READ_INFLATE_BUDGET = 256 << 20  # the most a read holds inflated at once (bar one block)
_INT32 = struct.Struct(">i")
_FULL = "failed to write whole buffer"  # cramjam's error when the output buffer is full
_MIN_GUESS = 64 << 10
_Into = Callable[..., int]  # cramjam.<codec>.decompress_into(bytes, ndarray output)
_STREAMS: dict[int, _Into] = {
    GZIP: cramjam.gzip.decompress_into,
    LZ4: cramjam.lz4.decompress_into,
    ZSTD: cramjam.zstd.decompress_into,
}


class OutputLimitError(CorruptRecordError):
    """A compressed block that inflates (or claims to) past the limit it was given."""


def inflate_budget(compressed_bytes: int) -> int:
    """Most bytes ``compressed_bytes`` of compressed records may decompress to.

    ``max(16 MiB, 256 x compressed_bytes)``: far above what records usually compress by
    (a few times to a few tens of times), far below a bomb (zstd: 20000x on zeros).
    """
    return max(MIN_BUDGET, MAX_RATIO * compressed_bytes)


def inflate_groups(compressed: np.ndarray) -> list[slice] | None:
    """Consecutive groups of blocks (``compressed``: each block's compressed bytes, 0 for
    a raw one) whose :func:`inflate_budget` is at most :data:`READ_INFLATE_BUDGET` (a
    block past it alone in its group), or ``None`` when all of them fit in one. One step
    a group, not a block."""
    cap = READ_INFLATE_BUDGET // MAX_RATIO
    cum = np.cumsum(compressed, dtype=np.int64)
    n = len(cum)
    if not n or int(cum[-1]) <= cap:
        return None
    groups, i = [], 0
    while i < n:
        base = int(cum[i - 1]) if i else 0
        j = max(int(np.searchsorted(cum, base + cap, side="right")), i + 1)
        groups.append(slice(i, j))
        i = j
    return groups


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress a records block with ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level or 6))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return compress_frame(data, DEFAULT_LEVEL if level is None else level)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level or 3))
    raise CorruptRecordError(f"unknown compression codec id {codec} (expected 0-4)")


def decompress(codec: int, data: bytes | memoryview, *, max_output: int | None = None) -> bytes:
    """Decompress a records block; errors are :class:`CorruptRecordError` with the codec.

    ``max_output``: refuse a block that inflates past this many bytes (default
    ``min(inflate_budget(len(data)), MAX_BLOCK_OUTPUT)``).
    """
    if codec == NONE:
        return bytes(data)
    if max_output is None:
        max_output = min(inflate_budget(len(data)), MAX_BLOCK_OUTPUT)
    out = Inflater()
    out.append(codec, data, max_output)
    return out.data.tobytes()


class Inflater:
    """Decompresses records blocks back to back into one growing buffer (:attr:`data`).

    Each block gets room after the bytes so far: a guess (16x its size + 64 KiB, or what
    is free), doubled (and the block decompressed again) until it fits, up to ``limit + 1``
    bytes: a block that fills that much is refused. The buffer grows by doubling, keeping
    what it holds, so a log's blocks cost about one copy in all.
    """

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint8)
        self._used = 0

    @property
    def data(self) -> np.ndarray:
        """All blocks appended so far, back to back (a view of the buffer)."""
        return self._buf[: self._used]

    @property
    def buffer(self) -> np.ndarray:
        """The whole buffer: the blocks so far (:attr:`used` bytes), then free room."""
        return self._buf

    @property
    def used(self) -> int:
        return self._used

    @used.setter
    def used(self, n: int) -> None:
        """Bytes written into the free room by another writer (the compiled kernel)."""
        self._used = n

    def reserve(self, size: int) -> np.ndarray:
        """``size`` bytes of free room after the used ones (the buffer grows, doubling)."""
        return self._room(size)

    def append_raw(self, data: bytes | memoryview) -> int:
        """Append an uncompressed block; returns its size."""
        self._room(len(data))[:] = np.frombuffer(data, dtype=np.uint8)
        self._used += len(data)
        return len(data)

    def append(self, codec: int, data: bytes | memoryview, limit: int) -> int:
        """Append ``data`` decompressed; returns its decompressed size.

        Raises :class:`CorruptRecordError` naming the codec and the numbers when ``data``
        does not decompress, :class:`OutputLimitError` when it inflates past ``limit``.
        """
        name = NAMES.get(codec)
        if name is None or codec == NONE:
            raise CorruptRecordError(f"unknown compression codec id {codec} (expected 1-4)")
        try:
            if codec == SNAPPY:
                n = self._snappy(memoryview(data), limit)
            else:
                fast = inflate_frame(data, self._room, limit) if codec == LZ4 else None
                n = self._stream(_STREAMS[codec], data, limit) if fast is None else fast
        except CorruptRecordError as exc:
            raise type(exc)(f"{name} block of {len(data)} bytes: {exc}") from None
        except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
            raise CorruptRecordError(
                f"{name} block of {len(data)} bytes does not decompress: {exc}"
            ) from None
        self._used += n
        return n

    def _room(self, size: int) -> np.ndarray:
        """``size`` bytes after the used ones, growing the buffer (doubling) if needed."""
        end = self._used + size
        if len(self._buf) < end:
            # from Arrow's memory pool: it reuses freed memory, where a fresh numpy array
            # of 100 MB pays a page fault per page
            grown = np.frombuffer(pa.allocate_buffer(max(end, 2 * len(self._buf))), np.uint8)
            grown[: self._used] = self._buf[: self._used]
            self._buf = grown
        return self._buf[self._used : end]

    def _stream(self, into: _Into, data: bytes | memoryview, limit: int) -> int:
        free = len(self._buf) - self._used
        size = min(limit + 1, max(free, 16 * len(data) + _MIN_GUESS))
        while True:
            try:
                n = into(data, self._room(size))
                if n <= limit:
                    return n
            except Exception as exc:
                if _FULL not in str(exc):
                    raise
            if size > limit:
                raise OutputLimitError(f"inflates past the limit of {limit} bytes")
            size = min(limit + 1, 2 * size)

    def _snappy(self, view: memoryview, limit: int) -> int:
        """Raw snappy, or xerial blocks (int32 length + raw snappy) after the 16-byte
        header; each raw block starts with its decompressed length (a varint)."""
        if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
            blocks = [view]
        else:
            blocks, pos = [], len(XERIAL_HEADER)
            while pos < len(view):
                if pos + 4 > len(view):
                    raise CorruptRecordError(
                        f"xerial block length at {pos} runs past the end ({len(view)} bytes)"
                    )
                (size,) = _INT32.unpack_from(view, pos)
                pos += 4
                if size < 0 or pos + size > len(view):
                    raise CorruptRecordError(
                        f"xerial block at {pos - 4} claims {size} bytes, {len(view) - pos} remain"
                    )
                blocks.append(view[pos : pos + size])
                pos += size
        claims = [cramjam.snappy.decompress_raw_len(b) for b in blocks]
        total = sum(claims)
        if total > limit:
            raise OutputLimitError(
                f"{len(blocks)} raw block(s) claim {total} bytes, past the limit of {limit} bytes"
            )
        out = self._room(total)
        at = 0
        for i, (block, claim) in enumerate(zip(blocks, claims, strict=True)):
            got = cramjam.snappy.decompress_raw_into(block, out[at : at + claim])  # type: ignore[arg-type]  # ndarray
            if got != claim:
                raise CorruptRecordError(f"raw block {i} claims {claim} bytes, holds {got}")
            at += got
        return at


def _xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)
