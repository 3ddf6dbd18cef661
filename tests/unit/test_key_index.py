"""The key index's bytes: XXH64 of Arrow key columns (kernel and numpy against each other,
libxxhash and known vectors), the split-block bloom filter (no false negatives, its
measured false-positive rate, folding), and the ``.keyindex`` file (round trip, every
damage detected, candidates by hash)."""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.errors import CorruptIndexError
from seglake.record import key_hash, native
from seglake.storage.key_filter import (
    BROADCAST_BYTES,
    MAX_BYTES,
    KeyFilter,
    filter_bytes,
)
from seglake.storage.key_index import (
    ENTRY_SIZE,
    HEADER_SIZE,
    KeyIndex,
    KeyIndexBuilder,
    read_filter,
)
from tests.key_index_check import check_key_index, check_partition_dir

LIB = native.kernel()
needs_kernel = pytest.mark.skipif(LIB is None, reason="seglake_native is not built (make venv)")
HYPO = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# XXH64, seed 0 (xxHash's own test values; the first three are in its sanity checks)
VECTORS = {
    b"": 0xEF46DB3751D8E999,
    b"a": 0xD24EC4F1A98C6E5B,
    b"abc": 0x44BC2CF5AD770999,
    b"0123456789abcdef0123456789abcdef!": 0x8AFFF4DAAC4E677E,
}


def _libxxhash():
    name = ctypes.util.find_library("xxhash")
    if name is None:
        return None
    lib = ctypes.CDLL(name)
    lib.XXH64.restype = ctypes.c_uint64
    lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return lib


XXHASH = _libxxhash()


def numpy_hashes(keys: pa.Array) -> np.ndarray:
    with patch.object(native, "kernel", lambda: None):
        return key_hash.key_hashes(keys)[0]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary(), pa.string()])
def test_known_vectors_both_paths(kind) -> None:
    values = list(VECTORS)
    keys = pa.array([v.decode() for v in values] if kind == pa.string() else values, kind)
    want = np.array(list(VECTORS.values()), np.uint64)
    assert (numpy_hashes(keys) == want).all()
    assert (key_hash.key_hashes(keys)[0] == want).all()


@needs_kernel
@HYPO
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=140)), max_size=60),
    st.integers(0, 5),
    st.booleans(),
)
def test_kernel_equals_numpy_and_libxxhash(values, cut, large) -> None:
    keys = pa.array(values, pa.large_binary() if large else pa.binary())[cut:]  # sliced too
    fast, valid = key_hash.key_hashes(keys)
    slow = numpy_hashes(keys)
    assert fast.dtype == np.uint64 and (fast == slow).all()
    assert list(valid) == [v is not None for v in values[cut:]]
    if XXHASH is not None:
        ref = [XXHASH.XXH64(v or b"", len(v or b""), 0) for v in values[cut:]]
        assert fast.tolist() == ref


def random_hashes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, n, dtype=np.uint64, endpoint=False)


@pytest.mark.parametrize("n", [1, 1_000, 50_000])
def test_filter_meets_its_target(n) -> None:
    present = random_hashes(n, 1)
    f = KeyFilter.build(present, filter_bytes(n))
    assert f.may_contain(present).all()  # never a false negative
    fpr = f.may_contain(random_hashes(200_000, 2)).mean()
    assert fpr <= 0.015, fpr  # 1 % target (sizes round up to a power of two blocks)


def test_filter_folds_to_a_broadcast_share() -> None:
    present = random_hashes(100_000, 3)
    f = KeyFilter.build(present, filter_bytes(100_000))
    assert f.nbytes == MAX_BYTES
    share = BROADCAST_BYTES // 10_000  # 10,000 segments' filters in the budget
    small = f.folded(share)
    assert small.nbytes <= share and small.nbytes == 4096
    assert small.may_contain(present).all()
    # folding is exact: the small filter is the one built at that size
    assert small.to_bytes() == KeyFilter.build(present, 4096).to_bytes()


def test_filter_size_cap() -> None:
    assert filter_bytes(0) == 32
    assert filter_bytes(10**9) == MAX_BYTES
    assert filter_bytes(10**9, max_bytes=6000) == 4096


def sample_index() -> KeyIndex:
    b = KeyIndexBuilder(1000)
    b.add(pa.array([b"a", None, b"b", b"a"], pa.binary()), np.array([1000, 1001, 1002, 1005]))
    return b.finish(1006)


def test_round_trip_and_candidates() -> None:
    idx = sample_index()
    data = idx.to_bytes()
    assert len(data) == HEADER_SIZE + idx.filter.nbytes + ENTRY_SIZE * 3
    back = KeyIndex.from_bytes(data, 1000)
    assert back.entries == 3 and back.next_offset == 1006
    h = key_hash.key_hashes(pa.array([b"a", b"zz", b"b"], pa.binary()))[0]
    which, offsets = back.candidates(h)
    assert which.tolist() == [0, 0, 2] and offsets.tolist() == [1000, 1005, 1002]
    assert read_filter(data[: HEADER_SIZE + idx.filter.nbytes], 1000).may_contain(h[[0, 2]]).all()


def test_a_mapped_file_is_searched_in_place(tmp_path) -> None:
    """A local ``.keyindex`` is memory-mapped and its exact level searched there: the
    hashes and offsets are views of the file's buffer, not copies."""
    import sys

    import pyarrow.fs as pafs

    from seglake import fs as lakefs

    idx = sample_index()
    path = str(tmp_path / "00000000000000001000.keyindex")
    lakefs.write_bytes(pafs.LocalFileSystem(), path, idx.to_bytes())
    buf = lakefs.read_all_buffer(pafs.LocalFileSystem(), path)
    back = KeyIndex.from_bytes(buf, 1000)
    raw = np.frombuffer(buf, np.uint8)
    if sys.byteorder == "little":
        assert np.shares_memory(back.hashes, raw) and np.shares_memory(back.offsets, raw)
    assert back.hashes.tolist() == idx.hashes.tolist()
    assert back.offsets.tolist() == idx.offsets.tolist()


def test_every_damage_is_detected() -> None:
    data = sample_index().to_bytes()
    for i in range(len(data)):
        if 44 <= i < 48:  # reserved
            continue
        bad = bytearray(data)
        bad[i] ^= 0x40
        with pytest.raises(CorruptIndexError, match="keyindex"):
            KeyIndex.from_bytes(bytes(bad), 1000, path="x.keyindex")
    for cut in (0, 10, len(data) - 1):
        with pytest.raises(CorruptIndexError):
            KeyIndex.from_bytes(data[:cut], 1000)
    with pytest.raises(CorruptIndexError, match=r"base offset 1000 \(expected 7\)"):
        KeyIndex.from_bytes(data, 7)


# ------------------------------------------------------------------ writer and lookup
def write_segments(
    tmp_path, keys: list[bytes | None], segment_bytes: int = 1 << 30, **conf: object
) -> str:
    import pyarrow.fs as pafs

    from seglake.config import LogConfig
    from seglake.storage.writer import SegmentWriter

    n = len(keys)
    table = pa.table(
        {
            "offset": pa.array(np.arange(n) * 2 + 5, pa.int64()),  # gaps, as after compaction
            "timestamp": pa.array(np.arange(n) + 1_700_000_000_000, pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        }
    )
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=segment_bytes, batch_size=300).with_overrides(conf or None)
    w = SegmentWriter(pafs.LocalFileSystem(), str(d), config=cfg, min_offset=0)
    for part in (table.slice(0, n // 3), table.slice(n // 3)):
        w.append(part)
    w.close()
    return str(d)


def test_writer_writes_the_key_index(tmp_path) -> None:
    rng = np.random.default_rng(4)
    keys = [None if r < 0.1 else b"k%d" % (r * 50) for r in rng.random(600)]
    d = write_segments(tmp_path, keys, segment_bytes=4096)
    assert check_partition_dir(d) > 2  # rolled: one .keyindex per segment


def open_segments(d: str):
    import pyarrow.fs as pafs

    from seglake.storage.segment import LogSegment

    return [LogSegment(pafs.LocalFileSystem(), str(p)) for p in sorted(Path(d).glob("*.log"))]


def brute_force(segs, query) -> list[tuple[int, bytes]]:
    wanted = {q for q in query if q is not None}
    out = []
    for s in segs:
        t = s.read_records()
        for o, k in zip(t.column("offset").to_pylist(), t.column("key").to_pylist(), strict=True):
            if k is not None and k in wanted:
                out.append((o, k))
    return out


def found(segs, query) -> tuple[list[tuple[int, bytes]], list[str]]:
    from seglake.storage.key_lookup import find_keys

    rows, statuses = [], []
    for s in segs:
        m = find_keys(s, query)
        statuses.append(m.status)
        rows += zip(
            m.records.column("offset").to_pylist(), m.records.column("key").to_pylist(), strict=True
        )
        for q, k in zip(
            m.records.column("query").to_pylist(), m.records.column("key").to_pylist(), strict=True
        ):
            assert query[q] == k
    return rows, statuses


key_values = st.one_of(st.none(), st.binary(max_size=3), st.sampled_from([b"dup", b"x" * 40]))


@HYPO
@given(
    st.lists(key_values, min_size=1, max_size=120), st.lists(key_values, max_size=8), st.booleans()
)
def test_lookup_equals_brute_force(tmp_path_factory, keys, query, collide) -> None:
    from seglake.storage import key_index

    tmp = tmp_path_factory.mktemp("kl")
    real = key_index.hash_keys

    def few_hashes(k):  # the test hook: 4 hash values, every key collides
        h, v = real(k)
        return h & np.uint64(3), v

    with patch.object(key_index, "hash_keys", few_hashes if collide else real):
        d = write_segments(tmp, keys, segment_bytes=1024)
        segs = open_segments(d)
        rows, statuses = found(segs, query + keys[:2])
    assert sorted(rows) == sorted(brute_force(segs, query + keys[:2]))
    assert set(statuses) == {"index"}


def test_missing_or_damaged_index_is_scanned_and_says_so(tmp_path) -> None:
    keys = [b"a", b"b", None, b"a"] * 50
    d = write_segments(tmp_path, keys)
    (log,) = sorted(Path(d).glob("*.log"))
    ki = log.with_suffix(".keyindex")
    data = ki.read_bytes()
    want = brute_force(open_segments(d), [b"a"])
    ki.write_bytes(data[:-3])  # damaged
    rows, (status,) = found(open_segments(d), [b"a"])
    assert sorted(rows) == sorted(want)
    assert status.startswith("scanned: ") and "00000000000000000005.keyindex" in status
    ki.unlink()  # missing
    rows, (status,) = found(open_segments(d), [b"a"])
    assert sorted(rows) == sorted(want) and status.endswith("keyindex: missing")


def test_a_rebased_staged_segment_keeps_a_right_key_index(tmp_path) -> None:
    """ingest's second pass moves a task's staged segments by a delta (spark/
    ingest_rebase.py): the .keyindex moves with them, its header rebased."""
    import pyarrow.fs as pafs

    from seglake.spark.ingest_rebase import _patch
    from seglake.storage.key_index import move_key_index

    d = write_segments(tmp_path, [b"a", None, b"b"] * 40)
    (log,) = sorted(Path(d).glob("*.log"))
    delta = 1_000_000
    span = int(KeyIndex.from_bytes(log.with_suffix(".keyindex").read_bytes(), 5).next_offset) - 5
    _patch(str(log), delta, span)
    moved = log.with_name(f"{5 + delta:020d}.log")
    log.rename(moved)
    fs = pafs.LocalFileSystem()
    move_key_index(
        fs, str(log.with_suffix(".keyindex")), str(moved.with_suffix(".keyindex")), delta
    )
    assert not log.with_suffix(".keyindex").exists()
    assert check_key_index(moved).entries == 80


@needs_kernel
@HYPO
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=300),
    st.integers(0, 3),
    st.sampled_from([32, 64, 4096]),
)
def test_kernel_sort_and_filter_equal_numpy(values, dups, nbytes) -> None:
    """sl_sort_pairs (stable radix sort) and sl_sbbf give numpy's bytes."""
    h = np.array(values * (1 + dups), np.uint64)  # equal hashes: offsets keep their order
    offsets = np.arange(len(h)) * 3 + 100
    fast = KeyIndex.build(100, 100 + 3 * len(h) + 1, h, offsets, max_filter_bytes=nbytes)
    with patch.object(native, "kernel", lambda: None):
        slow = KeyIndex.build(100, 100 + 3 * len(h) + 1, h, offsets, max_filter_bytes=nbytes)
    assert fast.to_bytes() == slow.to_bytes()
    assert fast.hashes.tolist() == sorted(h.tolist())


@needs_kernel
def test_kernel_sort_of_large_and_crafted_inputs_equals_numpy() -> None:
    """sl_sort_pairs past the hypothesis sizes: uniform hashes, hashes sharing their top
    40 bits, one hash many times (equal hashes keep their offsets' order) and the three
    mixed, as numpy's stable argsort and lexsort order them."""
    rng = np.random.default_rng(5)
    uniform = rng.integers(0, 2**64 - 1, 20_000, dtype=np.uint64)
    shared = np.uint64(0xABCDEF1234 << 24) | rng.integers(0, 2**24, 20_000, dtype=np.uint64)
    same = np.full(5_000, 0x42, np.uint64)
    for h in (uniform, shared, same, rng.permutation(np.concatenate([uniform, shared, same]))):
        offsets = np.arange(len(h), dtype=np.int64) + 7
        fast = KeyIndex.build(7, 7 + len(h), h, offsets)
        with patch.object(native, "kernel", lambda: None):
            slow = KeyIndex.build(7, 7 + len(h), h, offsets)
        assert fast.to_bytes() == slow.to_bytes()
        order = np.lexsort((offsets, h))
        assert np.array_equal(fast.hashes, h[order])
        assert np.array_equal(fast.offsets, (offsets[order] - 7).astype(np.uint32))


def test_builder_bytes_are_the_format_s() -> None:
    """A builder's file, pieces with null keys and repeated keys, hashed against the bytes
    the first version of the format wrote (kernel and numpy): a faster build changes no
    byte."""
    import hashlib

    def build() -> bytes:
        rng = np.random.default_rng(32)
        b = KeyIndexBuilder(1000)
        for part in range(3):
            keys = [None if k % 11 == 0 else b"k-%d" % k for k in rng.integers(0, 3000, 4000)]
            b.add(pa.array(keys, pa.binary()), 1000 + part * 4000 + np.arange(4000))
        return b.finish(1000 + 12000).to_bytes()

    want = "af33185e450264cf1a499c93f643ef58db2a45f09e5971cc10af3fbe56902ea2"
    assert hashlib.sha256(build()).hexdigest() == want
    with patch.object(native, "kernel", lambda: None):
        assert hashlib.sha256(build()).hexdigest() == want


def test_builder_finishes_again_after_more_records() -> None:
    """finish, more records, finish: the index of all of them, as one builder given them
    all (finish keeps its sorted entries as the builder's)."""
    rng = np.random.default_rng(8)
    keys = [b"k%d" % k for k in rng.integers(0, 40, 600)]
    once, twice = KeyIndexBuilder(10), KeyIndexBuilder(10)
    once.add(pa.array(keys, pa.binary()), 10 + np.arange(600))
    twice.add(pa.array(keys[:250], pa.binary()), 10 + np.arange(250))
    first = twice.finish(260)
    twice.add(pa.array(keys[250:], pa.binary()), 260 + np.arange(350))
    assert twice.finish(610).to_bytes() == once.finish(610).to_bytes()
    assert twice.finish(610).to_bytes() == once.finish(610).to_bytes()  # finish is repeatable
    assert (
        first.entries == 250
        and first.to_bytes()
        == KeyIndex.build(
            10, 260, key_hash.key_hashes(pa.array(keys[:250], pa.binary()))[0], 10 + np.arange(250)
        ).to_bytes()
    )


def test_key_index_can_be_switched_off(tmp_path) -> None:
    """``seglake.key.index.enable=false``: the writer's segments have their ``.index`` and
    ``.timeindex``, no ``.keyindex``."""
    d = Path(
        write_segments(
            tmp_path,
            [b"k%d" % (i % 7) for i in range(300)],
            2048,
            **{"seglake.key.index.enable": "false"},
        )
    )
    logs = sorted(d.glob("*.log"))
    assert len(logs) >= 2
    assert not list(d.glob("*.keyindex"))
    assert all(
        p.with_suffix(".index").exists() and p.with_suffix(".timeindex").exists() for p in logs
    )


def test_recover_writes_a_missing_damaged_or_truncated_key_index(tmp_path) -> None:
    from seglake.storage.recovery import recover_partition

    rng = np.random.default_rng(9)
    d = write_segments(tmp_path, [b"k%d" % k for k in rng.integers(0, 30, 400)], 2048)
    logs = sorted(Path(d).glob("*.log"))
    assert len(logs) >= 3
    logs[0].with_suffix(".keyindex").unlink()
    ki = logs[1].with_suffix(".keyindex")
    ki.write_bytes(ki.read_bytes()[:60])
    last = logs[-1].read_bytes()
    logs[-1].write_bytes(last[: len(last) - 7])  # a torn tail: the last batch cut
    rep = recover_partition(d)
    why = [s.key_index for s in rep.segments]
    assert why[0] == "missing" and why[1] == "damaged or stale" and why[-1] == "log truncated"
    assert set(why[2:-1]) == {None}  # right ones kept
    assert check_partition_dir(d) == len(logs)
    assert [s.key_index for s in recover_partition(d).segments] == [None] * len(logs)


def test_a_key_the_filter_rules_out_reads_only_the_head(tmp_path) -> None:
    from seglake.storage.key_lookup import find_keys

    d = write_segments(tmp_path, [b"key-%d" % i for i in range(15_000)])
    (seg,) = open_segments(d)
    assert Path(seg.stem + ".keyindex").stat().st_size > 150_000  # exact level past the head
    with patch.object(seg.files, "index_file", side_effect=AssertionError("read whole")):
        m = find_keys(seg, [b"absent"])
    assert m.status == "index" and m.records.num_rows == 0
    m = find_keys(seg, [b"key-7", b"absent"])  # a hit reads the exact level
    assert m.records.column("offset").to_pylist() == [5 + 2 * 7]


def test_dump_of_a_partition_listing_is_unchanged(tmp_path) -> None:
    """`seglake dump dir/*`: the .log/.index/.timeindex output as without a .keyindex;
    the .keyindex gets Kafka's DumpLogSegments lines for a file it does not know."""
    import io

    from seglake.cli.dump import dump

    d = write_segments(tmp_path, [b"a", None, b"b"] * 40, 2048)
    files = sorted(str(p) for p in Path(d).iterdir())
    keyindexes = [f for f in files if f.endswith(".keyindex")]
    outs = []
    for listing in (files, [f for f in files if f not in keyindexes]):
        out, err = io.StringIO(), io.StringIO()
        assert dump(listing, deep=True, print_data=True, out=out, err=err) == 0
        outs.append((out.getvalue(), err.getvalue()))
    (with_out, with_err), (without_out, without_err) = outs
    ignored = [f"Ignoring unknown file {f}" for f in keyindexes]
    assert sorted(with_err.splitlines()) == sorted(without_err.splitlines() + ignored)
    for f in keyindexes:
        with_out = with_out.replace(f"Dumping {f}\n", "")
    assert with_out == without_out


def test_records_that_do_not_decode_get_no_key_index(tmp_path) -> None:
    """A CRC-valid batch whose records are bad (hostile bytes): recover keeps the segment
    as before (a Kafka segment need not decode), writes no .keyindex and says why."""
    from seglake.record.crc import crc32c
    from seglake.storage.recovery import recover_partition

    d = write_segments(tmp_path, [b"a", b"b"] * 10)
    (log,) = sorted(Path(d).glob("*.log"))
    data = bytearray(log.read_bytes())
    data[61] = 0x31  # the first record's length varint: -25
    data[17:21] = crc32c(bytes(data[21 : 12 + int.from_bytes(data[8:12], "big")])).to_bytes(
        4, "big"
    )
    log.write_bytes(bytes(data))
    rep = recover_partition(d)
    (seg,) = rep.segments
    assert seg.key_index.startswith("not built: ") and "length -25" in seg.key_index
    assert not log.with_suffix(".keyindex").exists() and not rep.changed
