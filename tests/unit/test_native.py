"""The compiled kernel (``seglake_native``, :mod:`seglake.record.native`) against the numpy
code it stands in for: the same bytes from the encoder, the same tables and scans from the
decoder, the same error (type and message) for bad bytes, on random records (null keys
and values, headers, big varints, negative timestamp deltas) and mutated logs; and the
silent fallback where the kernel is absent, stale or switched off (``SEGLAKE_NATIVE=0``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.config import LogConfig
from seglake.errors import SeglakeError
from seglake.record import batch, native, reader
from seglake.record.batch import SCAN_COLUMNS, scan_batches
from seglake.record.crc import crc32c_ranges
from seglake.record.encode import encode_batches
from seglake.record.reader import decode_batches, read_log, record_times
from seglake.storage import window_records
from seglake.storage.segment_window import Window
from seglake.storage.window_records import min_timestamps
from tests.unit.test_encode import record_lists, table
from tests.unit.test_fuzz import mutated_logs

LIB = native.kernel()
needs_kernel = pytest.mark.skipif(LIB is None, reason="seglake_native is not built (make venv)")
HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[2]


def outcome(fn, *args, **kwargs):
    """The result, or the SeglakeError's type and message."""
    try:
        return fn(*args, **kwargs)
    except SeglakeError as exc:
        return type(exc), str(exc)


def both(fn, *args, **kwargs):
    """``(kernel's outcome, numpy's outcome)`` of one call (the kernel's batch scan even
    for the few batches it leaves to Python)."""
    with patch.object(batch, "NATIVE_SCAN_BYTES", 0), patch.object(batch, "NATIVE_SCAN_BATCHES", 0):
        fast = outcome(fn, *args, **kwargs)
    with patch.object(native, "kernel", lambda: None):
        slow = outcome(fn, *args, **kwargs)
    return fast, slow


def same_scan(a, b) -> None:
    for name in SCAN_COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (a.valid_bytes, a.error, a.truncated, a.skipped) == (
        b.valid_bytes,
        b.error,
        b.truncated,
        b.skipped,
    )


def same_outcome(a, b) -> None:
    if isinstance(a, tuple):
        assert a == b
    else:
        assert not isinstance(b, tuple), b
        assert a.equals(b)


@cache
def log_with_headers(codec: int, step: int = 9) -> bytes:
    """40 records in batches of ``step`` (5 batches): null keys and values, headers (some
    null values), offset gaps, timestamp deltas of both signs."""
    recs = [
        (
            10 + 3 * i + i % 3,
            1_700_000_000_000 + (i * 7919) % 5000 - 2500,
            None if i % 5 == 0 else f"k{i}".encode(),
            None if i % 7 == 3 else b"v" * (i % 23),
            None if i % 4 == 0 else [(f"h{j}", None if j == 1 else b"x" * j) for j in range(i % 3)],
        )
        for i in range(40)
    ]
    return encode_batches(table(recs), codec=codec, batch_starts=np.arange(0, 40, step)).tobytes()


@needs_kernel
def test_kernel_loads_where_it_is_installed():
    spec = importlib.util.find_spec(native.MODULE)
    assert spec is not None and native.load(spec.origin) is not None


@needs_kernel
@HYPO
@given(
    recs=record_lists(max_records=40, wide_timestamps=True),
    batch_size=st.sampled_from([1, 200, 1000, 16384]),
    max_records=st.sampled_from([0, 3]),
    codec=st.sampled_from([0, 0, 3]),
)
def test_encode_and_decode_match_numpy(recs, batch_size, max_records, codec):
    config = LogConfig(batch_size=batch_size, batch_max_records=max_records)
    fast, slow = both(encode_batches, table(recs), config=config, codec=codec)
    assert fast.tobytes() == slow.tobytes()
    for name in ("position", "size", "record_start", "max_timestamp", "base_sequence"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    buf = fast.tobytes()
    (t1, s1), (t2, s2) = both(read_log, buf)
    same_scan(s1, s2)
    assert t1.equals(t2) and t1.num_rows == len(recs)
    for a, b in zip(*both(record_times, buf, s1), strict=True):
        np.testing.assert_array_equal(a, b)


@needs_kernel
@HYPO
@given(recs=record_lists(max_records=30), data=st.data())
def test_given_starts_and_bases_match_numpy(recs, data):
    n = len(recs)
    starts = sorted({0, *data.draw(st.lists(st.integers(0, n - 1), max_size=5))})
    offsets = [recs[s][0] for s in starts]
    lower = [o - data.draw(st.integers(0, min(o, 1000))) for o in offsets]
    bases = (np.array(lower), np.array([recs[s][1] - 5 for s in starts]))
    fast, slow = both(encode_batches, table(recs), batch_starts=np.array(starts), batch_bases=bases)
    if isinstance(fast, tuple):  # an error (a base above a batch's first offset, ...)
        assert fast == slow
    else:
        assert fast.tobytes() == slow.tobytes()


@needs_kernel
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    buf=st.one_of(
        mutated_logs(), mutated_logs(log_with_headers(0)), mutated_logs(log_with_headers(4))
    ),
    verify=st.booleans(),
    skip=st.booleans(),
    stop=st.sampled_from([None, 30, 10**6]),
)
def test_mutated_logs_give_the_same_scan_table_or_error(buf, verify, skip, stop):
    s1, s2 = both(scan_batches, buf, verify_crc=verify, skip_corrupt=skip, stop_after_offset=stop)
    same_scan(s1, s2)
    same_outcome(*both(decode_batches, buf, s1))
    t1, t2 = both(record_times, buf, s1)
    if isinstance(t1, tuple) and isinstance(t1[0], type):
        assert t1 == t2
    else:
        np.testing.assert_array_equal(np.array(t1), np.array(t2))
    capped, _ = both(scan_batches, buf, max_batches=2, verify_crc=verify)
    same_scan(capped, _)


@needs_kernel
@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=5000), skip=st.integers(0, 7))
def test_crc32c_matches_the_crc32c_package(data, skip):
    assert LIB is not None
    if not native.has_crc(LIB):
        pytest.skip("no SSE4.2 here: the encoder uses the crc32c package")
    arr = np.frombuffer(data, np.uint8)[min(skip, len(data)) :]
    assert LIB.sl_crc32c(arr.ctypes.data, len(arr)) == crc32c(arr.tobytes())


@settings(max_examples=100, deadline=None)
@given(
    data=st.binary(max_size=3000),
    ranges=st.lists(st.tuples(st.integers(0, 3100), st.integers(0, 3100)), max_size=20),
)
def test_crc32c_ranges_match_a_slice_each(data, ranges):
    """Many ranges in one call (the kernel's, and the package's loop without it) give
    each slice's CRC-32C, a range past the data cut at its end, an empty one 0."""
    arr = np.frombuffer(data, np.uint8)
    start = np.array([a for a, _ in ranges], np.int64)
    end = np.array([b for _, b in ranges], np.int64)
    want = [crc32c(data[a:b]) for a, b in ranges]
    assert crc32c_ranges(arr, start, end).tolist() == want
    with patch.object(native, "kernel", lambda: None):
        assert crc32c_ranges(arr, start, end).tolist() == want


def test_one_abi_version():
    """The C source, its package version and the wrapper name the same ABI version."""
    source = (ROOT / "native" / "seglake_native.c").read_text()
    project = (ROOT / "native" / "pyproject.toml").read_text()
    assert f"#define ABI_VERSION {native.ABI_VERSION}\n" in source
    assert f'version = "{native.ABI_VERSION}"' in project


def test_absent_stale_or_switched_off_kernel_falls_back(tmp_path, monkeypatch):
    not_a_library = tmp_path / "seglake_native.so"
    not_a_library.write_bytes(b"not a shared library")
    assert native.load(str(tmp_path / "missing.so")) is None
    assert native.load(str(not_a_library)) is None
    with patch.object(importlib.util, "find_spec", lambda name: None):
        assert native.load() is None
    if LIB is not None:
        origin = importlib.util.find_spec(native.MODULE).origin
        monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)
        with pytest.warns(RuntimeWarning, match=r"built for ABI \d+, this seglake calls"):
            assert native.load(origin) is None  # built from another version of the C source
        monkeypatch.undo()
    monkeypatch.setenv("SEGLAKE_NATIVE", "0")
    assert native.kernel() is None
    buf = log_with_headers(0)
    records, _ = read_log(buf)
    assert encode_batches(records, batch_starts=np.arange(0, 40, 9)).tobytes() == buf


def test_package_zipped_for_executors_still_encodes(tmp_path):
    """spark-submit.sh ships lib/seglake as a zip: the kernel comes from the venv or not
    at all, and either way the codec works."""
    zipped = tmp_path / "seglake.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for p in sorted((ROOT / "lib" / "seglake").rglob("*.py")):
            z.write(p, p.relative_to(ROOT / "lib"))
    code = (
        "import numpy as np, pyarrow as pa\n"
        "from seglake.record import native\n"
        "from seglake.record.reader import read_log\n"
        "from seglake.record.encode import encode_batches\n"
        f"assert native.__file__.startswith({str(zipped)!r})\n"
        "t = pa.table({'offset': np.arange(5), 'timestamp': np.arange(5), 'value': [b'v'] * 5})\n"
        "records, _ = read_log(encode_batches(t).tobytes())\n"
        "assert records.column('value').to_pylist() == [b'v'] * 5\n"
        "print(native.kernel() is not None)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(zipped)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("True", "False")


def walks(buf: bytes, cut: int):
    """``(kernel's, numpy's)`` :func:`window_records.walk_windows` and :func:`min_timestamps`
    of ``buf``'s batches (CRCs not checked: damaged records reach the walk), as two
    windows split at batch ``cut``."""
    scan = scan_batches(buf, verify_crc=False, stop_on_crc_error=False)
    w = Window(0, buf, scan)
    k = min(cut, len(scan))
    parts = [(w, np.arange(k)), (w, np.arange(k, len(scan)))]
    fast = outcome(lambda: (window_records.walk_windows(parts), min_timestamps(parts)))
    with patch.object(native, "kernel", lambda: None):
        slow = outcome(lambda: (window_records.walk_windows(parts), min_timestamps(parts)))
    return fast, slow


def same_walk(fast, slow) -> None:
    assert type(fast) is type(slow)
    if not isinstance(fast, tuple) or isinstance(fast[0], type):
        assert fast == slow
        return
    (a, a_min), (b, b_min) = fast, slow
    same_scan(a.scan, b.scan)
    for name in ("ok", "first", "start", "end", "offset", "timestamp"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert bytes(a.data) == bytes(b.data)
    np.testing.assert_array_equal(a_min, b_min)
    if len(a.offset):  # the records decode alike from both walks' places
        rec = np.unique(np.linspace(0, len(a.offset) - 1, 7).astype(np.int64))
        same_outcome(outcome(a.decode, rec), outcome(b.decode, rec))


def window_logs():
    """Logs of every codec, clean and damaged (the window walk's and picks' inputs)."""
    return st.one_of(
        st.sampled_from([0, 1, 2, 3, 4]).map(log_with_headers),
        st.sampled_from([0, 3]).flatmap(lambda c: mutated_logs(log_with_headers(c))),
        mutated_logs(),
    )


@needs_kernel
@HYPO
@given(buf=window_logs(), cut=st.integers(0, 6))
def test_window_walk_matches_numpy(buf, cut):
    """The lookup's and extract's record walk: the kernel's places, offsets, timestamps and
    batch minima are the numpy set-aside walk's, damaged logs included."""
    same_walk(*walks(buf, cut))


@needs_kernel
def test_window_walk_uses_the_kernel():
    """A clean log is walked by the kernel (walk_windows, then min_timestamps), with
    every record's place."""
    calls = []
    real = reader.walk_native

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    with patch.object(reader, "walk_native", spy):
        fast, slow = walks(log_with_headers(3), 2)
    assert len(calls) == 2 and all(c is not None and c.walk.rec_start is not None for c in calls)
    same_walk(fast, slow)
