"""Kafka's lz4 records block: the LZ4 frame exactly as Kafka's Java producer writes it
(``org.apache.kafka.common.compress.Lz4BlockOutputStream``)::

    04 22 4D 18        magic
    60                 FLG: version 01, blocks independent; no block checksum,
                       no content size, no content checksum
    40                 BD: blocks of at most 64 KiB
    82                 HC: (xxHash32(FLG BD) >> 8) & 0xFF
    per 64 KiB of input:
        uint32 LE size | data           compressed; or, when that is not smaller,
        uint32 LE size | 0x80000000     the input bytes stored as they are
    00 00 00 00        end mark (no content checksum)

Kafka's Java reader (``Lz4BlockInputStream``) refuses a frame whose blocks are linked
("Dependent block stream is unsupported"), the default of most LZ4 frame libraries.
The compressor follows Kafka's rule for ``compression.lz4.level``: at the default level
9 lz4-java's *fast* compressor (``LZ4_compress_default``), at any other level LZ4 HC at
that level; python-lz4 binds the same reference C library.
"""

from __future__ import annotations

import lz4.block

__all__ = ["DEFAULT_LEVEL", "HEADER", "compress_frame"]

HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
BLOCK = 64 << 10
DEFAULT_LEVEL = 9  # Kafka's CompressionType.LZ4.defaultLevel(): the fast compressor
_STORED = 0x80000000
_END = b"\x00\x00\x00\x00"


def compress_frame(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """``data`` as one Kafka lz4 frame (see the module)."""
    view = memoryview(data).cast("B")
    parts = [HEADER]
    for start in range(0, len(view), BLOCK):
        chunk = view[start : start + BLOCK]
        if level == DEFAULT_LEVEL:
            block = lz4.block.compress(chunk, store_size=False)
        else:
            block = lz4.block.compress(
                chunk, mode="high_compression", compression=level, store_size=False
            )
        if len(block) < len(chunk):
            parts += (len(block).to_bytes(4, "little"), block)
        else:
            parts += ((len(chunk) | _STORED).to_bytes(4, "little"), bytes(chunk))
    parts.append(_END)
    return b"".join(parts)
