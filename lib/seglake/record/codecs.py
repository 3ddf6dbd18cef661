"""Compression codecs of RecordBatch v2, as Kafka's Java client frames them.

    id  name    frame
    0   none
    1   gzip    gzip stream (RFC 1952)
    2   snappy  xerial framing: b"\\x82SNAPPY\\x00" + int32 version(1) + int32 compat(1),
                then blocks of int32 length + raw snappy; raw (unframed) snappy is accepted too
    3   lz4     LZ4 frame format
    4   zstd    zstd frame

Implemented on ``cramjam`` (Rust, no system libraries). Decompression refuses output
larger than ``max_output`` so a forged length cannot allocate gigabytes.
"""

from __future__ import annotations

import struct

import cramjam

from seglake.errors import CorruptRecordError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024
DEFAULT_MAX_OUTPUT = 1 << 31
_INT32 = struct.Struct(">i")


def compress(codec: int, data: bytes | memoryview, level: int | None = None) -> bytes:
    """Compress a records block with ``codec``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data, level=level or 6))
    if codec == SNAPPY:
        return _xerial_compress(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data, level=level if level is not None else 9))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level or 3))
    raise CorruptRecordError(f"unknown compression codec id {codec} (expected 0-4)")


def decompress(codec: int, data: bytes | memoryview, *, max_output: int = DEFAULT_MAX_OUTPUT
               ) -> bytes:
    """Decompress a records block; errors are :class:`CorruptRecordError` with the codec."""
    if codec == NONE:
        return bytes(data)
    name = NAMES.get(codec)
    if name is None:
        raise CorruptRecordError(f"unknown compression codec id {codec} (expected 0-4)")
    try:
        if codec == GZIP:
            out = cramjam.gzip.decompress(data)
        elif codec == SNAPPY:
            out = _snappy_decompress(bytes(data), max_output)
        elif codec == LZ4:
            out = cramjam.lz4.decompress(data)
        else:
            out = cramjam.zstd.decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError / ValueError
        raise CorruptRecordError(f"{name} block of {len(data)} bytes does not decompress: "
                                 f"{exc}") from None
    out = bytes(out)
    if len(out) > max_output:
        raise CorruptRecordError(f"{name} block decompresses to {len(out)} bytes, more than "
                                 f"the limit {max_output}")
    return out


def _xerial_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw(block: bytes, max_output: int) -> bytes:
    # the raw format starts with the uncompressed length as a (non-zig-zag) varint
    claimed, shift = 0, 0
    for b in block[:5]:
        claimed |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    else:
        raise CorruptRecordError("snappy block has no valid length prefix")
    if claimed > max_output:
        raise CorruptRecordError(f"snappy block claims {claimed} bytes, more than the limit "
                                 f"{max_output}")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_output: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data, max_output)
    pos, parts, total = 16, [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecordError(f"xerial snappy block length at {pos} runs past the end "
                                     f"({len(data)} bytes)")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecordError(f"xerial snappy block at {pos - 4} claims {size} bytes, "
                                     f"{len(data) - pos} remain")
        part = _snappy_raw(data[pos:pos + size], max_output - total)
        total += len(part)
        parts.append(part)
        pos += size
    return b"".join(parts)
