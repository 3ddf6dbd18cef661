"""The vectorised header scan against the careful one (``scan_batches(verify_crc=False)``,
one Python step per batch), on valid, mutated and random logs, whole or in ranges: every
column, ``valid_bytes``, ``error`` and ``truncated`` equal; and on an ``mmap``."""

from __future__ import annotations

import mmap
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.record.batch import HEADER_SIZE, SCAN_COLUMNS, BatchScan, scan_batches
from seglake.record.header_scan import header_bytes, scan_headers
from tests.unit.test_fuzz import FUZZ, mutated_logs, valid_log


def assert_same(a: BatchScan, b: BatchScan) -> None:
    for c in SCAN_COLUMNS:
        x, y = getattr(a, c), getattr(b, c)
        assert x.dtype == y.dtype and np.array_equal(x, y), c
    assert (a.valid_bytes, a.error, a.truncated, a.skipped) == (
        b.valid_bytes,
        b.error,
        b.truncated,
        b.skipped,
    )


def swapped(buf: bytes, i: int) -> bytes:
    """Batches ``i`` and ``i + 1`` (mod count) swapped: offsets go backwards there."""
    scan = scan_batches(buf, verify_crc=False)
    n = len(scan)
    i, j = sorted((i % n, (i + 1) % n))
    parts = [buf[int(p) : int(p + z)] for p, z in zip(scan.position, scan.size, strict=True)]
    parts[i], parts[j] = parts[j], parts[i]
    return b"".join(parts)


def forged(buf: bytes, i: int, field: int, value: int) -> bytes:
    """Batch ``i``'s header byte ``field`` (16: magic, 23: lastOffsetDelta's sign, 57:
    recordsCount's sign) set to ``value``."""
    scan = scan_batches(buf, verify_crc=False)
    out = bytearray(buf)
    out[int(scan.position[i % len(scan)]) + field] = value
    return bytes(out)


logs = st.one_of(
    st.builds(
        forged,
        st.sampled_from([0, 1]).map(valid_log),
        st.integers(0, 20),
        st.sampled_from([16, 23, 57]),
        st.sampled_from([0, 1, 3, 0x80, 0xFF]),
    ),
    st.sampled_from([0, 1, 4]).map(valid_log),
    mutated_logs(),
    st.binary(max_size=400),
    st.builds(swapped, st.sampled_from([0, 3]).map(valid_log), st.integers(0, 20)),
)


@FUZZ
@given(logs, st.data())
def test_scan_headers_equals_the_careful_scan(buf: bytes, data) -> None:
    assert_same(scan_headers(buf), scan_batches(buf, verify_crc=False))
    start = data.draw(st.integers(0, len(buf)))
    end = data.draw(st.one_of(st.none(), st.integers(0, len(buf) + 5)))
    got = scan_headers(buf, start=start, end=end)
    assert_same(got, scan_batches(buf, start=start, end=end, verify_crc=False))


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([0, 2, 3]), st.integers(0, 3))
def test_scan_headers_on_an_mmap(tmp_path_factory, codec: int, cut: int) -> None:
    buf = valid_log(codec)
    buf = buf[: len(buf) - cut]  # a torn tail when cut > 0
    path = tmp_path_factory.mktemp("mm") / "x.log"
    path.write_bytes(buf)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        got = scan_headers(mm)  # the mmap closes: no export of it is left
    assert_same(got, scan_batches(buf, verify_crc=False))
    assert (got.error is None) == (cut == 0)


def test_a_short_length_falls_back_to_the_careful_error() -> None:
    buf = bytearray(valid_log(0))
    buf[8:12] = struct.pack(">i", 10)  # below the minimum 49
    got = scan_headers(bytes(buf))
    assert got.error is not None and "below the minimum" in got.error and len(got) == 0


@given(st.data(), st.integers(HEADER_SIZE, 300))
def test_header_bytes_are_the_bytes_at_each_position(data, n):
    """header_bytes (rows of a sliding window) = the bytes an index array of n x 61
    positions gathers, up to the data's last header; a negative position (the index
    array's path) counts from the end, as numpy's."""
    buf = np.arange(n, dtype=np.int64).astype(np.uint8)
    at = np.array(data.draw(st.lists(st.integers(-n, n - HEADER_SIZE), max_size=20)), np.int64)
    got = header_bytes(buf, at)
    assert got.shape == (len(at), HEADER_SIZE)
    assert np.array_equal(got, buf[at[:, None] + np.arange(HEADER_SIZE)])
