"""CRC-32C (Castagnoli), as RecordBatch v2 uses it, via the C-backed ``crc32c`` package."""

from __future__ import annotations

from crc32c import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    return _crc32c(data, value)
