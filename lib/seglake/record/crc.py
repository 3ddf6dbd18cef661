"""CRC-32C (Castagnoli), as RecordBatch v2 uses it: one value via the C-backed ``crc32c``
package; many ranges of one buffer in one call of the kernel (``sl_crc_ranges``) where
it computes CRC-32C, else one package call a range (every batch of a buffer:
:func:`seglake.record.batch.batch_crcs`)."""

from __future__ import annotations

import numpy as np
from crc32c import crc32c as _crc32c

from seglake.record import native

__all__ = ["crc32c", "crc32c_ranges"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    return _crc32c(data, value)


def crc32c_ranges(data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """CRC-32C of each ``data[start[i]:end[i]]`` (uint8 ``data``; a range reaching past
    it is cut at its end, as a slice is), uint32."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = len(data)
    lo = np.clip(start, 0, n)
    hi = np.maximum(lo, np.minimum(end, n))
    lib = native.kernel()
    if lib is not None and native.has_crc(lib) and len(start) and (start >= 0).all():
        data = np.ascontiguousarray(data, dtype=np.uint8)
        out = np.empty(len(start), np.uint32)
        lo, hi = native.int64s(lo), native.int64s(hi)
        if n:
            lib.sl_crc_ranges(
                native.address(data),
                len(lo),
                native.address(lo),
                native.address(hi),
                native.address(out),
            )
        else:
            out[:] = 0
        return out
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray
    return np.array(
        [_crc32c(view[a:b]) for a, b in zip(start.tolist(), end.tolist(), strict=True)],
        dtype=np.uint32,
    )
