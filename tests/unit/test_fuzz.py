"""Fuzzing the byte parsers: random and mutated bytes must give a result or a
SeglakeError subclass, never another exception, a hang or a huge allocation (traced
memory under 64 MB, all memory under :func:`limited`'s ``RLIMIT_AS``). Every file kind
through the entry points users hit: ``test_fuzz_files.py``, with these helpers.

Bounded in CI: SEGLAKE_FUZZ_EXAMPLES (default 300) examples per property; ``make fuzz``
runs 20000. Also: names and paths that could leave the lake are refused before any file
is touched."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import resource
import signal
import struct
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import cramjam
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake import fs as lakefs
from seglake import lake_paths
from seglake.errors import CatalogError, InvalidTopicError, SeglakeError
from seglake.lake.catalog import Catalog
from seglake.record import codecs
from seglake.record.batch import HEADER_SIZE, scan_batches
from seglake.record.encode import encode_batches
from seglake.record.reader import decode_batches, read_log
from seglake.storage.naming import parse_partition_dir, validate_topic
from seglake.storage.offset_index import OffsetIndex
from seglake.storage.recovery import recover_segment
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import TransactionIndex

EXAMPLES = int(os.environ.get("SEGLAKE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=2000,
    derandomize=EXAMPLES <= 300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MEMORY_BOUND = 64 << 20  # no input below takes more than this, whatever it claims
HEADROOM = 1536 << 20  # address space an example may add (RLIMIT_AS)
HANG_SECONDS = 20


class Hang(Exception):
    """An example ran past :data:`HANG_SECONDS`."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Hang(f"no result after {HANG_SECONDS} s")


@contextlib.contextmanager
def limited() -> Iterator[None]:
    """The block runs with at most :data:`HEADROOM` more address space (a soft
    ``RLIMIT_AS``, put back after) and an alarm after :data:`HANG_SECONDS` (a hang in C
    code that ignores it ends the process, with its traceback, after three times that)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    cap = size + HEADROOM if hard == resource.RLIM_INFINITY else min(size + HEADROOM, hard)
    previous = signal.signal(signal.SIGALRM, _alarm)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    # a hang inside C code (a blocked open or read) ignores the alarm: end the process
    faulthandler.dump_traceback_later(HANG_SECONDS * 3, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.setitimer(signal.ITIMER_REAL, 0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)


@cache
def valid_log(codec: int) -> bytes:
    n = 60
    rec = pa.table(
        {
            "offset": pa.array(np.arange(n), pa.int64()),
            "timestamp": pa.array(1_700_000_000_000 + np.arange(n), pa.int64()),
            "key": pa.array([f"k{i}".encode() if i % 3 else None for i in range(n)], pa.binary()),
            "value": pa.array([b"x" * (i % 20) for i in range(n)], pa.binary()),
        }
    )
    return encode_batches(rec, codec=codec, batch_starts=np.arange(0, n, 7)).tobytes()


FORGED_INTS = {
    ">h": [-1, 0, 1, 0x7FFF, -0x8000],
    ">i": [-1, 0, 1, 12, 61, 0x7FFFFFFF, -0x80000000, 1 << 24],
    ">q": [-1, 0, 1, 2**62, 2**63 - 1, -(2**63), 1 << 40],
}


@st.composite
def mutated_logs(draw, base: bytes | None = None) -> bytes:
    """A valid log (``base``, or :func:`valid_log` of any codec) with a few mutations: bit
    flips, bytes set, truncations, splices, a batch's length or count forged, any
    int16/32/64 field forged, a zero tail."""
    buf = bytearray(base if base is not None else valid_log(draw(st.sampled_from([0, 1, 2, 3, 4]))))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(
            st.sampled_from(
                ["flip", "set", "truncate", "splice", "length", "count", "int", "zeros"]
            )
        )
        if not buf:
            break
        i = draw(st.integers(0, len(buf) - 1))
        if op == "flip":
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = draw(st.integers(0, 255))
        elif op == "truncate":
            del buf[i:]
        elif op == "splice":
            buf[i:i] = draw(st.binary(max_size=64))
        elif op == "length" and len(buf) >= 12:  # a batch length claiming up to 2 GB
            buf[8:12] = struct.pack(">i", draw(st.sampled_from([0x7FFFFFFF, -1, 49, 0, 1 << 30])))
        elif op == "count" and len(buf) >= HEADER_SIZE:  # records count / offsets forged
            buf[57:61] = struct.pack(">i", draw(st.sampled_from([0x7FFFFFFF, -5, 1 << 24])))
        elif op == "int":  # any int32/int64 field forged: counts, lengths, offsets, sizes
            fmt = draw(st.sampled_from([">i", ">q", ">h"]))
            value = draw(st.sampled_from(FORGED_INTS[fmt]))
            buf[i : i + struct.calcsize(fmt)] = struct.pack(fmt, value)
        elif op == "zeros":  # zeros from here on (a preallocated tail), or appended
            n = draw(st.integers(1, 256))
            buf[i:] = bytes(len(buf) - i) if draw(st.booleans()) else buf[i:] + bytes(n)
    return bytes(buf)


log_bytes = st.one_of(st.binary(max_size=2048), mutated_logs())


@contextlib.contextmanager
def traced_peak_below(bound: int) -> Iterator[None]:
    """The block's peak of traced (Python and numpy) memory stays under ``bound`` bytes."""
    tracemalloc.start()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < bound, f"peaked at {peak} bytes"


def bounded(fn, *args, **kwargs):
    """Run ``fn``; only SeglakeError may escape; the traced peak stays under the bound
    (and all memory, native buffers too, under :func:`limited`'s)."""
    with limited(), traced_peak_below(MEMORY_BOUND):
        try:
            return fn(*args, **kwargs)
        except SeglakeError:
            return None


@FUZZ
@given(log_bytes)
def test_scan_never_raises(buf: bytes) -> None:
    scan = bounded(scan_batches, buf)
    assert scan is not None  # documented: never raises for bad bytes
    assert 0 <= scan.valid_bytes <= len(buf)
    assert int(scan.size.sum()) == scan.valid_bytes


@FUZZ
@given(log_bytes)
def test_read_log_raises_only_seglake_errors(buf: bytes) -> None:
    bounded(read_log, buf, skip_control=False)


@FUZZ
@given(mutated_logs())
def test_decode_without_crc_raises_only_seglake_errors(buf: bytes) -> None:
    """The CRC usually stops corrupt batches before decoding: skip it, so the record
    decoder itself sees the damage."""
    scan = scan_batches(buf, verify_crc=False)
    bounded(decode_batches, buf, scan, skip_control=False)


@FUZZ
@given(st.binary(max_size=600), st.integers(0, 2**40), st.integers(-(2**62), 2**62))
def test_indexes_from_garbage(buf: bytes, base: int, target: int) -> None:
    for cls in (OffsetIndex, TimeIndex):
        idx = cls.from_bytes(buf, base)
        try:
            idx.sanity_check()
        except SeglakeError:
            continue
        try:
            idx.lookup(target)
            if cls is TimeIndex:
                idx.lookup_strict(target)
        except SeglakeError:
            pass
    txn = TransactionIndex.from_bytes(buf, base)
    try:
        txn.sanity_check()
        txn.collect_aborted(min(target, 2**62), 2**62)
        list(txn)
    except SeglakeError:
        pass


@FUZZ
@given(st.sampled_from([0, 1, 2, 3, 4, 5, 7, -1]), st.binary(max_size=512))
def test_decompress_garbage(codec: int, data: bytes) -> None:
    bounded(codecs.decompress, codec, data)


@FUZZ
@given(st.sampled_from([1, 2, 3, 4]), st.binary(min_size=1, max_size=300), st.data())
def test_decompress_mutated_frames(codec: int, payload: bytes, data) -> None:
    frame = bytearray(codecs.compress(codec, payload * 3))
    i = data.draw(st.integers(0, len(frame) - 1))
    frame[i] = data.draw(st.integers(0, 255))
    bounded(codecs.decompress, codec, bytes(frame))


FORGED = {
    "zstd content size 1 TB": (
        4,
        b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 40) + b"\x01\x00\x00",
    ),
    "xerial snappy block 2 GB": (
        2,
        codecs.XERIAL_HEADER + struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 10,
    ),
    "raw snappy length 4 GB": (2, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10),
    "lz4 frame, bad header": (3, struct.pack("<I", 0x184D2204) + b"\x64\x70" + b"\x00" * 20),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_forged_sizes_do_not_allocate(name: str) -> None:
    codec, frame = FORGED[name]
    with pytest.raises(SeglakeError):
        codecs.decompress(codec, frame)
    bounded(codecs.decompress, codec, frame)


def test_batch_claiming_2gb_is_a_truncated_tail() -> None:
    buf = bytearray(valid_log(0))
    buf[8:12] = struct.pack(">i", 0x7FFFFFFF)
    scan = bounded(scan_batches, bytes(buf))
    assert len(scan) == 0 and "truncated" in scan.error
    records, scan = bounded(read_log, bytes(buf))
    assert records.num_rows == 0


def bomb(codec: int, size: int) -> bytes:
    """``size`` zero bytes (a multiple of 1 MiB) compressed, built without holding them:
    one frame (gzip member, xerial block) of 1 MiB of zeros, repeated."""
    if codec == codecs.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(bytes(codecs.XERIAL_BLOCK)))
        framed = struct.pack(">i", len(block)) + block
        return codecs.XERIAL_HEADER + framed * (size // codecs.XERIAL_BLOCK)
    mod = {codecs.GZIP: cramjam.gzip, codecs.LZ4: cramjam.lz4, codecs.ZSTD: cramjam.zstd}[codec]
    return bytes(mod.compress(bytes(1 << 20))) * (size >> 20)


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompression_bomb_is_bounded(codec: int) -> None:
    """200 MB of zeros in 10 KB (zstd) to 2 MB (snappy): refused having produced at most
    the limit (1 MiB), under the traced memory bound."""
    frame = bomb(codec, 200 << 20)
    with traced_peak_below(MEMORY_BOUND), pytest.raises(codecs.OutputLimitError) as err:
        codecs.decompress(codec, frame, max_output=1 << 20)
    assert f"{len(frame)} bytes" in str(err.value) and "limit of 1048576 bytes" in str(err.value)


def test_decompression_bomb_memory_outside_python() -> None:
    """tracemalloc sees numpy and Python, not cramjam's own (Rust) buffers: the peak RSS
    of a fresh process decompressing 1 GB bombs must not move by more than a few MiB."""
    code = f"""
import resource, sys
sys.path[:0] = {sys.path!r}
from seglake.errors import SeglakeError
from seglake.record import codecs
from tests.unit.test_fuzz import bomb
frames = [(c, bomb(c, 1 << 30)) for c in (1, 3, 4)]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for c, frame in frames:
    try:
        codecs.decompress(c, frame, max_output=4 << 20)
    except codecs.OutputLimitError:
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    grown_kib = int(out.stdout.split()[-1])
    assert grown_kib < 32 << 10, f"peak RSS grew by {grown_kib} KiB"


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_high_ratio_blocks_within_the_limit_decompress(codec: int) -> None:
    """Output far beyond the first guess of the buffer (16x the input + 64 KiB): it grows."""
    frame = bomb(codec, 8 << 20)
    assert codecs.decompress(codec, frame, max_output=8 << 20) == bytes(8 << 20)
    with pytest.raises(codecs.OutputLimitError):
        codecs.decompress(codec, frame, max_output=(8 << 20) - 1)


@FUZZ
@given(mutated_logs())
def test_recover_segment_on_mutated_logs(tmp_path_factory, buf: bytes) -> None:
    """Recovery keeps exactly the valid prefix and what it keeps decodes; never raises."""
    d = tmp_path_factory.mktemp("fz")
    p = d / "00000000000000000000.log"
    p.write_bytes(buf)
    fs, _ = lakefs.resolve(str(d))
    rep = recover_segment(fs, str(p), interval=128)
    kept = p.read_bytes()
    assert kept == buf[: rep.valid_bytes] and len(kept) == rep.valid_bytes
    assert not recover_segment(fs, str(p), interval=128).changed  # idempotent
    try:
        _records, scan = read_log(kept, skip_control=False)
    except SeglakeError:
        return  # a CRC-valid batch with broken records (CRC collision of a forged edit)
    assert scan.valid_bytes == len(kept) and scan.error is None


# ------------------------------------------------------------------ names and paths

BAD_TOPICS = [
    "../x",
    "..",
    ".",
    "a/b",
    "/etc",
    "a\\b",
    "",
    "x" * 250,
    "a b",
    "t:0",
    "%2e%2e",
    "a\x00b",
    "ü",
]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_topic_names_rejected(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)
    with pytest.raises(InvalidTopicError):
        parse_partition_dir(f"{topic}-0")


@FUZZ
@given(st.text(max_size=40))
def test_topic_validation_is_the_path_guard(name: str) -> None:
    try:
        validate_topic(name)
    except InvalidTopicError:
        return
    assert "/" not in name and name not in (".", "..") and "\\" not in name
    assert lake_paths.safe_join("/lake", f"{name}-0/00000000000000000000.log").startswith("/lake/")


@pytest.mark.parametrize(
    "path",
    [
        "../x.log",
        "/etc/passwd",
        "a/../../b",
        "s3://b/k",
        "file:///etc",
        "a//b",
        "./a",
        "a\\..\\b",
        "%2e%2e/a",
        "~/a",
        "C:/x",
        "a/\x00",
    ],
)
def test_safe_join_refuses_escapes(path: str) -> None:
    with pytest.raises(InvalidTopicError):
        lake_paths.safe_join("/lake", path)


@pytest.mark.parametrize(
    "topic,path",
    [
        ("t", "../t-0/00000000000000000000.log"),
        ("t", "/abs/t-0/00000000000000000000.log"),
        ("t", "u-0/00000000000000000000.log"),
        ("../t", "../t-0/00000000000000000000.log"),
    ],
)
def test_catalog_rows_with_escaping_paths_refused(tmp_path, topic: str, path: str) -> None:
    cat = Catalog(str(tmp_path / "lake"))
    row = pa.table(
        {
            "topic": [topic],
            "partition": pa.array([0], pa.int32()),
            "base_offset": [0],
            "next_offset": [1],
            "record_count": [1],
            "min_timestamp": [0],
            "max_timestamp": [0],
            "size_bytes": [70],
            "index_entries": pa.array([0], pa.int32()),
            "time_index_entries": pa.array([0], pa.int32()),
            "codec": ["none"],
            "path": [path],
        }
    )
    with pytest.raises((InvalidTopicError, CatalogError)):
        cat.commit(row, "evil")
    assert not (tmp_path / "t-0").exists() and not (tmp_path / "lake" / "t-0").exists()
