"""Batch headers of a whole ``.log`` at numpy speed (no record, no CRC).

:func:`scan_headers` gives what ``scan_batches(buf, verify_crc=False)`` gives, in two
steps instead of one Python step per batch of checks and tuples:

    chain    from ``start``, hop ``batchLength + 12`` bytes (the 4 bytes at +8 of each
             header: the only per-batch Python step) while a whole header is left and
             the length is at least the minimum (49)
    gather   the 61-byte headers at those positions in one numpy take
             (:func:`headers_at`), then every rule checked at once: the chain ends
             exactly at ``end``, magic 2, counts not negative, offsets increasing

Any batch that breaks a rule sends the whole range to :func:`~seglake.record.batch.
scan_batches` (rare: a torn or corrupt segment), so the error, ``valid_bytes`` and
``truncated`` are the careful scan's, to the word.
"""

from __future__ import annotations

import mmap
import struct

import numpy as np

from seglake.format import LOG_OVERHEAD
from seglake.record.batch import (
    HEADER_DTYPE,
    HEADER_SIZE,
    MAGIC,
    SCAN_COLUMNS,
    BatchScan,
    batch_crcs,
    scan_batches,
)

__all__ = ["header_bytes", "headers_at", "scan_headers"]

_LENGTH = struct.Struct(">i")  # batchLength, at +8 of a header
_MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_DERIVED = ("position", "size", "base_offset", "last_offset", "crc_valid")
_INT64_FIELDS = tuple(c for c in SCAN_COLUMNS if c not in _DERIVED)  # header fields as they are


def headers_at(
    data: np.ndarray, at: np.ndarray, *, verify_crc: bool = False
) -> tuple[BatchScan, np.ndarray]:
    """The batches whose headers start at ``at`` in ``data`` (uint8; each header whole,
    checked by the caller) as a scan with ``valid_bytes`` ``len(data)``, and whether each
    one's CRC-32C matches (``verify_crc``; else all True, the batches need not be whole)."""
    at = np.asarray(at, dtype=np.int64)
    h = _gather(data, at)
    size = h["batch_length"].astype(np.int64) + LOG_OVERHEAD
    ok = batch_crcs(data, at, size) == h["crc"] if verify_crc else np.ones(len(at), bool)
    crc_ok = np.asarray(ok, dtype=bool)
    return _scan(h, at, len(data), crc_ok), crc_ok


def scan_headers(
    buf: bytes | bytearray | memoryview | mmap.mmap, *, start: int = 0, end: int | None = None
) -> BatchScan:
    """``scan_batches(buf, start=start, end=end, verify_crc=False)``, vectorised (see the
    module docstring). ``buf`` may be an ``mmap``: only the header bytes are touched."""
    with memoryview(buf) as mv, mv.cast("B") as view:
        end = len(view) if end is None else min(end, len(view))
        positions = []
        pos = start
        unpack = _LENGTH.unpack_from
        while end - pos >= HEADER_SIZE:
            length = unpack(view, pos + 8)[0]
            if length < _MIN_LENGTH:
                break
            positions.append(pos)
            pos += length + LOG_OVERHEAD
        h = None
        if pos == end:
            at = np.asarray(positions, dtype=np.int64)
            data = np.frombuffer(view, dtype=np.uint8)
            h = _gather(data, at)
            del data  # no export of ``view`` may be left when it is released
    if h is not None:
        base = h["base_offset"].astype(np.int64)
        last = base + h["last_offset_delta"]
        bad = (
            (h["magic"] != MAGIC)
            | (h["records_count"] < 0)
            | (h["last_offset_delta"] < 0)
            | np.concatenate(([False], base[1:] <= last[:-1]))
        )
        if not bad.any():
            return _scan(h, at, end, np.ones(len(at), dtype=bool))
    return scan_batches(memoryview(buf), start=start, end=end, verify_crc=False)


def header_bytes(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The ``HEADER_SIZE`` bytes at each of ``at`` in ``data`` (uint8), ``(n, 61)``: rows
    of a sliding window copied (4x less CPU than an index array of n x 61 positions);
    the index array where a position lies outside ``0 .. len(data) - HEADER_SIZE``."""
    if (
        len(at)
        and len(data) >= HEADER_SIZE
        and at.min() >= 0
        and at.max() <= len(data) - HEADER_SIZE
    ):
        rows: np.ndarray = np.lib.stride_tricks.sliding_window_view(data, HEADER_SIZE)[at]
        return rows
    return np.ascontiguousarray(data[at[:, None] + np.arange(HEADER_SIZE)])


def _gather(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The 61-byte headers at ``at`` as one structured array (:data:`HEADER_DTYPE`)."""
    return header_bytes(data, at).view(HEADER_DTYPE).reshape(len(at))


def _scan(h: np.ndarray, at: np.ndarray, valid_bytes: int, crc_ok: np.ndarray) -> BatchScan:
    base = h["base_offset"].astype(np.int64)
    return BatchScan(
        position=at,
        size=h["batch_length"].astype(np.int64) + LOG_OVERHEAD,
        base_offset=base,
        last_offset=base + h["last_offset_delta"],
        crc_valid=crc_ok,
        valid_bytes=valid_bytes,
        **{f: h[f].astype(np.int64) for f in _INT64_FIELDS},  # type: ignore[arg-type]
    )
