"""The kernel's one-pass decode (``sl_decode``, :mod:`seglake.record.decode_fused`, chosen by
:func:`~seglake.record.reader.decode_parts`) against the numpy decoder: the same
records, chunk boundaries anywhere (a batch larger than a chunk, a frame larger than the
scratch buffer), with and without headers; damaged logs give the numpy path's very table
or error (the kernel refuses and the usual path names the problem); and, built with
AddressSanitizer, no access outside its buffers on forged logs."""

from __future__ import annotations

import contextlib
import textwrap
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.config import LogConfig
from seglake.record import decode_fused, native, reader
from seglake.record.batch import scan_batches
from seglake.record.encode import encode_batches
from seglake.storage import window_records
from seglake.storage.segment_window import Window
from tests.unit.asan import ROOT, run_under_asan
from tests.unit.test_encode import record_lists, table
from tests.unit.test_native import log_with_headers, outcome, window_logs

LIB = native.kernel()
needs_kernel = pytest.mark.skipif(LIB is None, reason="seglake_native is not built (make venv)")
HYPO = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TINY = {"CHUNK_ROWS": 3, "_FIRST_BYTES": (5, 7, 3, 3), "_SCRATCH": 16, "_SLACK": 0}


def chunks(tiny: bool):
    """Chunks (and the scratch buffer) of a few rows and bytes, or of the default size."""
    return patch.multiple(decode_fused, **TINY) if tiny else contextlib.nullcontext()


def windows(buf: bytes, cut: int, headers: bool):
    """``(fused, numpy)`` outcomes of :func:`decode_windows` over ``buf``'s batches as two
    windows split at batch ``cut`` (CRCs not checked: damaged records reach the decoder)."""
    scan = scan_batches(buf, verify_crc=False, stop_on_crc_error=False)
    w = Window(0, buf, scan)
    k = min(cut, len(scan))
    parts = [(w, np.arange(k), "a.log"), (w, np.arange(k, len(scan)), "b.log")]

    def run():
        t, rows = window_records.decode_windows(parts, headers=headers)
        return t.combine_chunks(), rows.tolist()

    fast = outcome(run)
    with patch.object(native, "kernel", lambda: None):
        slow = outcome(run)
    return fast, slow


def same(fast, slow) -> None:
    if isinstance(slow, tuple) and isinstance(slow[0], type):
        assert fast == slow
        return
    (a, ra), (b, rb) = fast, slow
    assert ra == rb
    assert a.equals(b), (a.slice(0, 3).to_pylist(), b.slice(0, 3).to_pylist())


@needs_kernel
@HYPO
@given(
    recs=record_lists(max_records=40, wide_timestamps=True),
    batch_size=st.sampled_from([1, 200, 1000, 16384]),
    codec=st.sampled_from([0, 3]),
    cut=st.integers(0, 6),
    headers=st.booleans(),
    tiny=st.booleans(),
)
def test_records_are_the_numpy_decoders(recs, batch_size, codec, cut, headers, tiny):
    """Random records (null keys and values, headers, wide timestamps), raw or lz4, in
    chunks of the default size or of a few rows and bytes (every batch then outgrows its
    chunk and the scratch buffer grows)."""
    config = LogConfig(batch_size=batch_size)
    buf = encode_batches(table(recs), config=config, codec=codec).tobytes()
    with chunks(tiny):
        fast, slow = windows(buf, cut, headers)
    same(fast, slow)
    assert fast[0].num_rows == len(recs)


@needs_kernel
@HYPO
@given(buf=window_logs(), cut=st.integers(0, 6), headers=st.booleans(), tiny=st.booleans())
def test_damaged_logs_give_the_numpy_table_or_error(buf, cut, headers, tiny):
    with chunks(tiny):
        same(*windows(buf, cut, headers))


@needs_kernel
@pytest.mark.parametrize(("codec", "used"), [(0, True), (3, True), (1, False), (4, False)])
def test_which_logs_take_the_one_pass_path(codec, used):
    """Raw and lz4 batches are decoded in one pass; gzip and zstd the usual way."""
    calls = []
    real = decode_fused.decode_fused

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    with patch.object(reader, "decode_fused", spy):
        fast, slow = windows(log_with_headers(codec), 2, True)
    same(fast, slow)
    assert len(calls) == 1 and (calls[0] is not None) == used


@needs_kernel
def test_a_header_key_that_is_not_utf8_is_left_to_the_numpy_path():
    recs = table([(0, 1_700_000_000_000, b"k", b"v", [("hkey", b"x")])])
    buf = bytearray(encode_batches(recs, codec=0).tobytes())
    at = bytes(buf).index(b"hkey")
    buf[at] = 0xFF
    scan = scan_batches(bytes(buf), verify_crc=False, stop_on_crc_error=False)
    batches = decode_fused.batches_of([(bytes(buf), scan)])
    assert decode_fused.decode_fused(LIB, batches, (1 << 20, 1 << 20)) is None
    assert decode_fused.decode_fused(LIB, batches, (1 << 20, 1 << 20), headers=False)
    fast, slow = windows(bytes(buf), 1, True)
    assert isinstance(slow[0], type) and fast == slow  # the numpy path's error


@needs_kernel
def test_chunks_hold_a_bounded_number_of_rows():
    recs = [(i, 1_700_000_000_000 + i, None, b"v" * 10, []) for i in range(1000)]
    buf = encode_batches(table(recs), config=LogConfig(batch_size=1000), codec=3).tobytes()
    scan = scan_batches(buf)
    with patch.object(decode_fused, "CHUNK_ROWS", 300):
        out = decode_fused.decode_fused(
            LIB, decode_fused.batches_of([(buf, scan)]), (1 << 20, 1 << 30)
        )
    assert out is not None and sum(t.num_rows for t in out) == 1000
    assert all(t.num_rows <= 300 for t in out) and len(out) >= 4
    assert pa.concat_tables(out).column("offset").to_pylist() == list(range(1000))


@needs_kernel
def test_large_records_take_chunks_of_bounded_bytes():
    """Values of 40 KB: later chunks are sized for the rows left, at most _MAX_BYTES each,
    not 64k rows of them (which passed int32 offsets and sent the lot the slow way)."""
    recs = [(i, 1_700_000_000_000 + i, b"k", bytes([i % 251]) * 40_000, []) for i in range(1000)]
    buf = encode_batches(table(recs), codec=0).tobytes()
    batches = decode_fused.batches_of([(buf, scan_batches(buf))])
    with patch.object(decode_fused, "_MAX_BYTES", 4 << 20):
        out = decode_fused.decode_fused(LIB, batches, (1 << 30, 1 << 40))
    assert out is not None and sum(t.num_rows for t in out) == 1000
    assert all(t.column("value").nbytes < (5 << 20) for t in out[1:])
    fast, slow = windows(buf, 0, True)
    same(fast, slow)


ASAN_RUN = textwrap.dedent(
    """
    import contextlib, random, sys
    from unittest.mock import patch
    import numpy as np
    sys.path.insert(0, sys.argv[4])
    from seglake.record import decode_fused, native, reader
    from seglake.record.batch import scan_batches
    from tests.unit.test_native import log_with_headers

    lib = native.load(sys.argv[1])
    assert lib is not None
    rng = random.Random(int(sys.argv[2]))
    tiny = {"CHUNK_ROWS": 3, "_FIRST_BYTES": (5, 7, 3, 3), "_SCRATCH": 16, "_SLACK": 0}
    # outputs from malloc (numpy), which ASan watches, not from Arrow's pool
    with patch.object(native, "pool_array", lambda n, dtype=np.uint8: np.empty(n, dtype)):
        for i in range(int(sys.argv[3])):
            buf = bytearray(log_with_headers(rng.choice([0, 3]), rng.choice([1, 2, 9])))
            for _ in range(rng.randrange(1, 6)):
                kind, at = rng.randrange(3), rng.randrange(len(buf) + 1)
                if kind == 0 and at < len(buf):
                    buf[at] = rng.randrange(256)
                elif kind == 1:
                    del buf[at:]
                else:
                    buf[at:at] = bytes([rng.randrange(256)])
            data = bytes(buf)
            scan = scan_batches(data, verify_crc=False, stop_on_crc_error=False)
            batches = decode_fused.batches_of([(data, scan)])
            if batches is None:
                continue
            with patch.multiple(decode_fused, **tiny) if i % 2 else contextlib.nullcontext():
                decode_fused.decode_fused(lib, batches, (1 << 16, 1 << 20), headers=bool(i % 3))
    print("clean")
    """
)


def test_no_out_of_bounds_access_under_address_sanitizer(tmp_path) -> None:
    """sl_decode built with -fsanitize=address, fed damaged logs (raw and lz4) with chunks
    of every size: no access outside its buffers (ASan aborts)."""
    out = run_under_asan(tmp_path, ASAN_RUN, "11", "1500", str(ROOT))
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-3000:]


@needs_kernel
def test_a_few_batches_get_buffers_of_their_size() -> None:
    """A point read's few batches (a notebook read of one index interval) are decoded into
    a chunk sized for them: old main gave every call a chunk of 64k rows and 20 MiB of
    buffers, which the returned table (and the notebook's LRU) held."""
    t = table([(i, 1000 + i, b"k", b"v%d" % i, None) for i in range(10)])
    buf = encode_batches(t, config=LogConfig(batch_size=5)).data
    scan = scan_batches(buf)
    before = pa.total_allocated_bytes()
    out, rows = window_records.decode_windows([(Window(0, buf, scan), np.arange(len(scan)), "a")])
    held = pa.total_allocated_bytes() - before
    assert rows.tolist() == [10] and out.column("offset").to_pylist() == list(range(10))
    assert held < 64 << 10, held
