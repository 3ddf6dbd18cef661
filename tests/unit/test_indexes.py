"""Offset, time and transaction indexes, and the index builder, against brute force."""

from __future__ import annotations

import itertools
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.errors import CorruptIndexError, OffsetOrderError, SeglakeError
from seglake.format import INT32_MAX
from seglake.storage.index_builder import IndexBuilder, prefix_indexes
from seglake.storage.offset_index import (
    DEFAULT_MAX_INDEX_SIZE,
    WARM_SECTION_BYTES,
    IndexFullError,
    InvalidIndexAppendError,
    OffsetIndex,
    ReadOnlyIndexError,
)
from seglake.storage.time_index import TimeIndex
from seglake.storage.txn_index import AbortedTxn, TransactionIndex

SETTINGS = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------------ generators
def sorted_entries(seed: int, n: int, base: int, dense: bool) -> tuple[np.ndarray, np.ndarray]:
    """``n`` strictly increasing (offset, position) pairs above ``base``."""
    rng = np.random.default_rng(seed)
    gap_hi = 3 if dense else 5000
    offsets = base + np.cumsum(rng.integers(1, gap_hi, n)) - (rng.integers(0, 2) if n else 0)
    positions = np.cumsum(rng.integers(61, 9000, n))
    return offsets.astype(np.int64), positions.astype(np.int64)


def targets_for(
    keys: np.ndarray, lo: int, rng: np.random.Generator, entry_size: int = 8
) -> np.ndarray:
    """Below the first key, above the last, equal to keys, +-1, and random in range."""
    if not len(keys):
        return np.array([lo - 5, lo - 1, lo, lo + 1, lo + 1000], dtype=np.int64)
    pick = keys[rng.integers(0, len(keys), min(len(keys), 150))]
    extra = [
        lo - 1,
        lo,
        keys[0] - 1,
        keys[0],
        keys[0] + 1,
        keys[-1] - 1,
        keys[-1],
        keys[-1] + 1,
        keys[-1] + 10**6,
    ]
    first_hot = keys[max(0, len(keys) - 1 - WARM_SECTION_BYTES // entry_size)]
    extra += [first_hot - 1, first_hot, first_hot + 1]
    rand = rng.integers(lo - 3, int(keys[-1]) + 3, 150)
    return np.concatenate([pick, pick - 1, pick + 1, extra, rand]).astype(np.int64)


def brute_floor(keys: np.ndarray, targets: np.ndarray, strict: bool = False) -> np.ndarray:
    """Slot of the last key <= (or <) each target, comparing every key with every target
    (no binary search, no reliance on order)."""
    if not len(keys):
        return np.full(len(targets), -1, dtype=np.int64)
    below = (keys[None, :] < targets[:, None]) if strict else (keys[None, :] <= targets[:, None])
    last = len(keys) - 1 - np.argmax(below[:, ::-1], axis=1)
    return np.where(below.any(axis=1), last, -1).astype(np.int64)


entry_sets = st.tuples(
    st.integers(0, 2**32),
    st.sampled_from([0, 1, 2, 7, 300, 1030, 2600]),
    st.sampled_from([0, 1, 10**9]),
    st.booleans(),
)


# ------------------------------------------------------------------------ offset index
@SETTINGS
@given(entry_sets)
def test_offset_lookup_equals_brute_force(spec) -> None:
    seed, n, base, dense = spec
    offsets, positions = sorted_entries(seed, n, base, dense)
    index = OffsetIndex.from_entries(base, offsets, positions)
    rng = np.random.default_rng(seed + 1)
    targets = targets_for(offsets, base, rng)
    slots = brute_floor(offsets, targets)
    assert slots.tolist() == (np.searchsorted(offsets, targets, side="right") - 1).tolist()
    want_off = np.where(slots >= 0, offsets[np.maximum(slots, 0)] if n else base, base)
    want_pos = np.where(slots >= 0, positions[np.maximum(slots, 0)] if n else 0, 0)
    got_off, got_pos = index.lookup_many(targets)
    assert got_off.tolist() == want_off.tolist()
    assert got_pos.tolist() == want_pos.tolist()
    scalar = [index.lookup(int(t)) for t in targets]  # warm/cold binary search
    assert [e.offset for e in scalar] == want_off.tolist()
    assert [e.position for e in scalar] == want_pos.tolist()
    assert index.offsets.tolist() == offsets.tolist()
    assert index.positions.tolist() == positions.tolist()
    assert len(index) == index.entries == n
    if n:
        assert tuple(index.entry(n - 1)) == (offsets[-1], positions[-1])
        assert index.last_offset == offsets[-1]


def test_warm_section_lookup_touches_only_the_warm_section() -> None:
    offsets, positions = sorted_entries(7, 5000, 0, False)
    index = OffsetIndex.from_bytes(OffsetIndex.from_entries(0, offsets, positions).to_bytes(), 0)
    warm = WARM_SECTION_BYTES // 8
    first_hot = 5000 - 1 - warm
    touched: list[int] = []
    read = index._key_at

    def spy(slot: int) -> int:
        touched.append(slot)
        return read(slot)

    index._key_at = spy  # type: ignore[method-assign]
    for target in [*offsets[first_hot + 1 :].tolist(), int(offsets[-1]) + 5]:
        touched.clear()
        index.lookup(target)
        assert min(touched) >= first_hot, target
        assert len(touched) <= 2 + 11  # first warm entry + log2(1024) + 1
    touched.clear()
    assert index.lookup(int(offsets[10])).offset == offsets[10]  # cold: still O(log n)
    assert len(touched) <= 3 + 13


@SETTINGS
@given(entry_sets, st.sampled_from([b"", b"\0" * 16, b"\0" * 8000]))
def test_offset_index_bytes_round_trip(spec, zeros: bytes) -> None:
    seed, n, base, dense = spec
    offsets, positions = sorted_entries(seed, n, base, dense)
    data = OffsetIndex.from_entries(base, offsets, positions).to_bytes()
    assert len(data) == 8 * n
    assert data == b"".join(
        struct.pack(">ii", o - base, p)
        for o, p in zip(offsets.tolist(), positions.tolist(), strict=True)
    )
    for buf in (data + zeros, bytearray(data + zeros), memoryview(data + zeros)):
        back = OffsetIndex.from_bytes(buf, base)
        back.sanity_check()
        assert len(back) == n
        assert back.to_bytes() == data
        assert back.offsets.tolist() == offsets.tolist()
        if n:
            assert back.raw_entries()["position"].tolist() == positions.tolist()


def test_offset_append_rejects_non_increasing() -> None:
    index = OffsetIndex(100)
    index.append(105, 4000)
    for offset, position in ((105, 9000), (104, 9000), (106, 4000), (106, 3000)):
        with pytest.raises(InvalidIndexAppendError) as exc:
            index.append(offset, position)
        assert isinstance(exc.value, CorruptIndexError)
        assert isinstance(exc.value, OffsetOrderError)
        assert str(offset) in str(exc.value) or str(position) in str(exc.value)
    with pytest.raises(InvalidIndexAppendError, match="99"):
        OffsetIndex(100).append(99, 10)
    with pytest.raises(InvalidIndexAppendError, match=str(100 + INT32_MAX + 1)):
        OffsetIndex(100).append(100 + INT32_MAX + 1, 10)
    with pytest.raises(InvalidIndexAppendError, match="position -1"):
        OffsetIndex(100).append(101, -1)
    assert index.entries == 1


def test_offset_index_full() -> None:
    index = OffsetIndex(0, max_index_size=8 * 5 + 7)
    assert index.max_entries == 5
    for i in range(5):
        assert not index.is_full
        index.append(10 * (i + 1), 100 * (i + 1))
    assert index.is_full
    with pytest.raises(IndexFullError, match="5 of 5"):
        index.append(60, 600)
    assert OffsetIndex.from_bytes(index.to_bytes(), 0).is_full  # read-only: full as mapped


def test_extend_is_vectorised_append_all_or_nothing() -> None:
    index = OffsetIndex(0)
    index.extend([5, 9], [100, 200])
    with pytest.raises(InvalidIndexAppendError, match="offset 9, position 300"):
        index.extend([12, 9], [250, 300])
    with pytest.raises(InvalidIndexAppendError, match="position 150"):
        index.extend([12], [150])
    assert list(index) == [(5, 100), (9, 200)]
    with pytest.raises(IndexFullError):
        OffsetIndex(0, 16).extend([1, 2, 3], [1, 2, 3])
    t = TimeIndex(0, 12 * 3)
    with pytest.raises(IndexFullError):
        t.extend([1, 2, 3], [0, 1, 2])  # the last slot is kept for the roll
    t.extend([1, 2, 3], [0, 1, 1], skip_full_check=True)
    assert list(t) == [(1, 0), (2, 1), (3, 1)]
    with pytest.raises(InvalidIndexAppendError, match="timestamp 2, offset 2"):
        TimeIndex(0).extend([1, 2, 2], [0, 1, 2])
    with pytest.raises(InvalidIndexAppendError, match="offset 0"):
        TimeIndex(0).extend([1, 2], [1, 0])
    with pytest.raises(InvalidIndexAppendError, match="-1"):
        TimeIndex(0).extend([-1], [0])


def test_read_only_index_rejects_writes() -> None:
    index = OffsetIndex.from_bytes(struct.pack(">ii", 3, 100), 0)
    with pytest.raises(ReadOnlyIndexError):
        index.append(10, 200)
    index.close()
    with pytest.raises(ReadOnlyIndexError):
        index.lookup(3)


# ------------------------------------------------------------------------ files
def test_preallocate_append_trim_reopen(tmp_path: Path) -> None:
    opath, tpath = tmp_path / "00000000000000000500.index", tmp_path / "x.timeindex"
    oi = OffsetIndex.open(opath, 500, writable=True)
    ti = TimeIndex.open(tpath, 500, writable=True)
    assert opath.stat().st_size == DEFAULT_MAX_INDEX_SIZE == 10_485_760
    assert tpath.stat().st_size == 10_485_756 == DEFAULT_MAX_INDEX_SIZE // 12 * 12
    assert (oi.max_entries, ti.max_entries) == (1_310_720, 873_813)
    assert oi.entries == ti.entries == 0
    for i in range(1, 101):
        oi.append(500 + 3 * i, 4100 * i)
        assert ti.maybe_append(1_700_000_000_000 + i, 500 + 3 * i)
    assert not ti.maybe_append(1_700_000_000_000 + 100, 800)  # not greater: ignored
    oi.flush()
    ti.flush()
    # a crash now leaves preallocated files: the used entries are the valid prefix
    crashed_o = OffsetIndex.from_bytes(opath.read_bytes(), 500)
    crashed_t = TimeIndex.from_bytes(tpath.read_bytes(), 500)
    crashed_o.sanity_check()
    crashed_t.sanity_check()
    assert (crashed_o.entries, crashed_t.entries) == (100, 100)
    assert crashed_o.to_bytes() == oi.to_bytes()
    assert crashed_t.last_entry == (1_700_000_000_100, 800)
    oi.close()
    ti.close()
    assert opath.stat().st_size == 100 * 8
    assert tpath.stat().st_size == 100 * 12
    with OffsetIndex.open(opath, 500) as ro:
        assert ro.entries == 100 and ro.is_full
        assert ro.lookup(650) == (650, 4100 * 50)
        assert ro.lookup(499) == (500, 0)
    # writable reopen of a trimmed file: resized back to the max, appends go on
    oi = OffsetIndex.open(opath, 500, writable=True, max_index_size=4096 + 5)
    assert opath.stat().st_size == 4096 and oi.max_entries == 512 and oi.entries == 100
    oi.append(900, 10**6)
    oi.close()
    assert opath.stat().st_size == 101 * 8


def test_reopen_untrimmed_file_writable(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    ti = TimeIndex.open(path, 0, writable=True, max_index_size=1200)
    for i in range(10):
        ti.maybe_append(1000 + i, i)
    ti.flush()
    raw = path.read_bytes()
    ti._release()  # simulate a crash: no trim
    assert len(raw) == 1200
    path.write_bytes(raw)
    ti = TimeIndex.open(path, 0, writable=True, max_index_size=1200)
    assert ti.entries == 10 and ti.last_entry == (1009, 9)
    ti.maybe_append(2000, 20)
    ti.close()
    assert path.stat().st_size == 11 * 12
    with pytest.raises(Exception, match="no such"):
        TimeIndex.open(tmp_path / "missing.timeindex", 0)


def test_truncate_reset_and_live_views(tmp_path: Path) -> None:
    path = tmp_path / "t.index"
    oi = OffsetIndex.open(path, 0, writable=True, max_index_size=800)
    oi.extend([5, 9, 14, 20], [100, 200, 300, 400])
    oi.truncate_to(14)
    assert list(oi) == [(5, 100), (9, 200)]
    oi.flush()
    assert OffsetIndex.from_bytes(path.read_bytes(), 0).entries == 2  # removed ones zeroed
    oi.append(12, 250)
    view = oi.raw_entries()
    assert view["relative_offset"].tolist() == [5, 9, 12]
    with pytest.raises(SeglakeError, match="still alive"):
        oi.close()  # cannot unmap under a live view; nothing changed
    del view
    oi.close()
    assert path.stat().st_size == 3 * 8
    ti = TimeIndex(0)
    ti.extend([1, 2, 3], [5, 9, 9])
    ti.truncate_to(9)
    assert list(ti) == [(1, 5)]
    ti.reset()
    assert len(ti) == 0 and ti.last_entry == (-1, 0)


def test_trailing_zero_entries_and_the_ambiguous_zero_slot() -> None:
    assert OffsetIndex.from_bytes(bytes(8 * 1000), 0).entries == 0  # fresh preallocated file
    assert OffsetIndex.from_bytes(bytes(8), 0).entries == 1  # one real (base, 0) entry
    zero_then_entry = bytes(8) + struct.pack(">ii", 4, 5000) + bytes(80)
    assert OffsetIndex.from_bytes(zero_then_entry, 7).offsets.tolist() == [7, 11]
    assert TimeIndex.from_bytes(bytes(12 * 50), 0).entries == 0
    t = TimeIndex.from_bytes(bytes(12) + struct.pack(">qi", 5, 2), 0)
    assert list(t) == [(0, 0), (5, 2)]


def test_sanity_check_catches_corrupt_files() -> None:
    good = struct.pack(">iiii", 10, 4100, 20, 8200)
    OffsetIndex.from_bytes(good, 0, path="p.index").sanity_check()
    cases = {
        good + b"\0\0\0": "not a multiple of the 8-byte",
        struct.pack(">iiiiii", 10, 4100, 30, 8200, 20, 9000): "relative offset 20, position 9000",
        struct.pack(">iiii", 10, 4100, 20, 4100): "position 4100",
        struct.pack(">ii", 10, -5) + bytes(16): "negative",
        good + bytes(8) + struct.pack(">ii", 40, 9999): "slot 2",
    }
    for data, needle in cases.items():
        index = OffsetIndex.from_bytes(data, 0, path="p.index")
        with pytest.raises(CorruptIndexError, match=needle) as exc:
            index.sanity_check()
        assert "p.index" in str(exc.value)
        assert index.entries <= 2  # lookups only ever use the valid prefix
    time_cases = {
        struct.pack(">qiqi", 50, 1, 40, 2): "timestamp 40",
        struct.pack(">qiqi", 50, 3, 60, 2): "relative offset 2",
        struct.pack(">qi", -7, 0) + bytes(12): "negative",
        struct.pack(">qi", 5, 1) + b"\xff" * 12: "slot 1",
        struct.pack(">qi", 5, 1) + b"\0" * 5: "12-byte",
    }
    for data, needle in time_cases.items():
        with pytest.raises(CorruptIndexError, match=needle):
            TimeIndex.from_bytes(data, 0, path="t.timeindex").sanity_check()


def test_writable_open_refuses_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "c.index"
    path.write_bytes(struct.pack(">iiii", 10, 4100, 5, 8200))
    with pytest.raises(CorruptIndexError, match=re.escape(str(path))):
        OffsetIndex.open(path, 0, writable=True)
    assert path.stat().st_size == 16  # untouched


# ------------------------------------------------------------------------ time index
@SETTINGS
@given(entry_sets)
def test_time_lookups_equal_brute_force(spec) -> None:
    seed, n, base, _dense = spec
    rng = np.random.default_rng(seed)
    timestamps = np.cumsum(rng.integers(1, 4 if seed % 2 else 100_000, n)) + rng.integers(0, 3)
    offsets = base + np.cumsum(rng.integers(0, 50, n))
    index = TimeIndex.from_entries(base, timestamps, offsets)
    assert index.timestamps.tolist() == timestamps.tolist()
    targets = targets_for(timestamps.astype(np.int64), 0, rng, entry_size=12)
    targets = np.concatenate([targets, [-(2**63), 2**63 - 1]]).astype(np.int64)
    for strict in (False, True):
        slots = brute_floor(timestamps, targets, strict)
        want = [(int(timestamps[s]), int(offsets[s])) if s >= 0 else (-1, base) for s in slots]
        ts, offs = index.lookup_many(targets, strict=strict)
        assert list(zip(ts.tolist(), offs.tolist(), strict=True)) == want
        scalar = index.lookup_strict if strict else index.lookup
        assert [tuple(scalar(int(t))) for t in targets] == want
    data = index.to_bytes()
    assert len(data) == 12 * n
    back = TimeIndex.from_bytes(data + bytes(12 * 3), base)
    back.sanity_check()
    assert back.to_bytes() == data
    assert back.last_entry == ((int(timestamps[-1]), int(offsets[-1])) if n else (-1, base))


def test_time_maybe_append_rules() -> None:
    index = TimeIndex(10)
    assert index.last_entry == (-1, 10)
    assert not index.maybe_append(-1, 10)  # not above the empty index's -1
    assert index.maybe_append(0, 12)
    assert index.maybe_append(100, 12)  # same offset, later timestamp: Kafka allows it
    assert not index.maybe_append(100, 20)
    with pytest.raises(InvalidIndexAppendError, match="offset 11"):
        index.maybe_append(200, 11)
    with pytest.raises(InvalidIndexAppendError, match="timestamp 99"):
        index.maybe_append(99, 30)
    with pytest.raises(InvalidIndexAppendError, match="9"):
        TimeIndex(10).maybe_append(5, 9)
    assert list(index) == [(0, 12), (100, 12)]


def test_time_index_full_keeps_the_last_slot_for_the_roll() -> None:
    index = TimeIndex(0, max_index_size=12 * 4)
    for i in range(3):
        index.maybe_append(10 + i, i)
    assert index.is_full  # entries >= max_entries - 1
    with pytest.raises(IndexFullError):
        index.maybe_append(50, 5)
    assert index.maybe_append(50, 5, skip_full_check=True)
    with pytest.raises(IndexFullError):
        index.maybe_append(60, 6, skip_full_check=True)


def test_strict_floor_is_exact_where_kafkas_is_not() -> None:
    """Batches with max timestamps 10, 20, 20, 30; a writer that put the time index entry
    for 20 on the *later* batch (older brokers, appends of several batches) makes Kafka's
    ``<=`` floor start the scan past batch 1, the first with a record at 20."""
    max_ts = np.array([10, 20, 20, 30])
    last_offsets = np.array([0, 1, 2, 3])
    positions = np.array([0, 100, 200, 300])
    oi = OffsetIndex.from_entries(0, [1, 2, 3], [100, 200, 300])
    ti = TimeIndex.from_entries(0, [10, 20, 30], [0, 2, 3])

    def first_batch_from(offset: int, target: int) -> int:
        start = oi.lookup(offset).position
        i = int(np.searchsorted(positions, start))
        return i + int(np.argmax(max_ts[i:] >= target))

    exact = int(np.argmax(max_ts >= 20))
    assert first_batch_from(ti.lookup(20).offset, 20) == 2 != exact
    assert first_batch_from(ti.lookup_strict(20).offset, 20) == exact == 1
    assert last_offsets[exact] == 1


# ------------------------------------------------------------------------ txn index
def txn_sets(seed: int, n_pids: int, n: int) -> list[AbortedTxn]:
    """Aborted transactions, disjoint per producer, ordered by (unique) last offset."""
    rng = np.random.default_rng(seed)
    txns = []
    cursor = dict.fromkeys(range(n_pids), 0)
    for _ in range(n):
        pid = int(rng.integers(0, n_pids))
        first = cursor[pid] + int(rng.integers(0, 40))
        last = first + int(rng.integers(0, 40))
        cursor[pid] = last + 1
        txns.append(AbortedTxn(pid * 1000 + 7, first, last, int(rng.integers(0, last + 1))))
    txns.sort(key=lambda t: t.last_offset)
    out: list[AbortedTxn] = []
    for t in txns:
        if not out or t.last_offset > out[-1].last_offset:
            out.append(t)
    return out


@SETTINGS
@given(st.integers(0, 2**32), st.integers(1, 6), st.integers(0, 60))
def test_txn_index_against_brute_force(seed: int, n_pids: int, n: int) -> None:
    txns = txn_sets(seed, n_pids, n)
    index = TransactionIndex(0)
    for t in txns:
        index.append(t)
    back = TransactionIndex.from_bytes(index.to_bytes(), 0)
    back.sanity_check()
    assert len(index.to_bytes()) == 34 * len(txns)
    assert back.all_aborted() == txns
    rng = np.random.default_rng(seed + 1)
    offsets = rng.integers(0, 2500, 800)
    pids = rng.integers(0, n_pids + 1, 800) * 1000 + 7  # one unknown producer
    want = [
        any(t.producer_id == p and t.first_offset <= o <= t.last_offset for t in txns)
        for o, p in zip(offsets.tolist(), pids.tolist(), strict=True)
    ]
    assert back.aborted_mask(offsets, pids).tolist() == want
    assert back.aborted_mask(offsets.reshape(40, 20), pids.reshape(40, 20)).ravel().tolist() == want
    for fetch, upper in rng.integers(0, 2500, (20, 2)).tolist():
        expected, complete = [], False
        for t in txns:  # Kafka's collectAbortedTxns loop
            if t.last_offset >= fetch and t.first_offset < upper:
                expected.append(t)
            if t.last_stable_offset >= upper:
                complete = True
                break
        assert back.search(fetch, upper) == (expected, complete)
        assert back.collect_aborted(fetch, upper) == expected


def test_txn_index_rejects_and_detects_disorder() -> None:
    index = TransactionIndex(100)
    index.append(AbortedTxn(1, 90, 120, 80))
    with pytest.raises(InvalidIndexAppendError, match="120"):
        index.append(AbortedTxn(2, 110, 120, 80))
    with pytest.raises(InvalidIndexAppendError, match="first offset 200"):
        index.append(AbortedTxn(2, 200, 150, 80))
    with pytest.raises(InvalidIndexAppendError, match="base offset 100"):
        TransactionIndex(100).append(AbortedTxn(2, 10, 50, 0))
    entry = struct.Struct(">hqqqq")
    bad = {
        entry.pack(0, 1, 5, 120, 0) + entry.pack(0, 2, 5, 110, 0): "entry 1: last offset 110",
        entry.pack(1, 1, 5, 120, 0): "version 1",
        entry.pack(0, 1, 5, 120, 0)[:-1]: "multiple of the 34-byte",
        entry.pack(0, 1, 130, 120, 0): "first offset 130",
    }
    for data, needle in bad.items():
        with pytest.raises(CorruptIndexError, match=needle):
            TransactionIndex.from_bytes(data, 100, path="t.txnindex").sanity_check()
    assert TransactionIndex.from_bytes(b"").aborted_mask([1, 2], [3, 4]).tolist() == [False] * 2


# ------------------------------------------------------------------------ builder
def kafka_reference(positions, sizes, last_offsets, max_ts, interval, base):
    """LogSegment.append, transcribed: one call per batch, then close()."""
    oi: list[tuple[int, int]] = []
    ti: list[tuple[int, int]] = []
    since, max_so_far, off_of_max = 0, -1, base
    for pos, size, last, mts in zip(positions, sizes, last_offsets, max_ts, strict=True):
        if mts > max_so_far:
            max_so_far, off_of_max = mts, last
        if since > interval:
            oi.append((last, pos))
            if max_so_far > (ti[-1][0] if ti else -1):
                ti.append((max_so_far, off_of_max))
            since = 0
        since += size
    if max_so_far > (ti[-1][0] if ti else -1):
        ti.append((max_so_far, off_of_max))
    return oi, ti


@SETTINGS
@given(
    st.integers(0, 2**32),
    st.integers(0, 600),
    st.sampled_from([0, 1, 100, 4096, 20000]),
    st.lists(st.integers(0, 600), max_size=4),
)
def test_builder_equals_kafka_loop(seed: int, n: int, interval: int, cuts: list[int]) -> None:
    rng = np.random.default_rng(seed)
    base = int(rng.integers(0, 10**12))
    sizes = rng.integers(61, 3000, n)
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1])) if n else np.zeros(0, np.int64)
    last = base + np.cumsum(rng.integers(1, 5, n)) - 1
    mts = rng.integers(-3, 50, n) + (np.arange(n) if seed % 3 else 0)  # also non-monotonic
    oi_ref, ti_ref = kafka_reference(
        positions.tolist(), sizes.tolist(), last.tolist(), mts.tolist(), interval, base
    )
    vec = IndexBuilder(base, index_interval_bytes=interval)
    bounds = [0, *sorted(c for c in cuts if c <= n), n]
    for a, b in itertools.pairwise(bounds):  # chunked calls carry state
        assert vec.add_batches(positions[a:b], sizes[a:b], last[a:b], mts[a:b]) == b - a
    one = IndexBuilder(base, index_interval_bytes=interval)
    for args in zip(positions.tolist(), sizes.tolist(), last.tolist(), mts.tolist(), strict=True):
        assert one.add_batch(*args)
    for builder in (vec, one):
        oi, ti = builder.finish()
        assert list(oi) == oi_ref
        assert list(ti) == ti_ref
        assert builder.max_timestamp == max([-1, *mts.tolist()])
        assert builder.batches == n
    assert vec.bytes_since_last_entry == one.bytes_since_last_entry
    assert vec.offset_of_max_timestamp == one.offset_of_max_timestamp


@SETTINGS
@given(
    st.integers(0, 2**32),
    st.integers(1, 400),
    st.sampled_from([0, 1, 100, 4096]),
    st.lists(st.integers(1, 399), min_size=1, max_size=3),
)
def test_resumed_closed_segments_equal_one_pass(
    seed: int, n: int, interval: int, cuts: list[int]
) -> None:
    """A segment closed (finish), then grown by appends (IndexBuilder.resume) and closed
    again, as often as ``cuts`` says: the indexes of one pass over every batch (Kafka's
    loop); and prefix_indexes of the grown ones gives each earlier closed segment's
    entries but for a final time index entry that finish forced."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(61, 3000, n)
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    last = 7 + np.cumsum(rng.integers(1, 5, n)) - 1
    mts = rng.integers(-3, 50, n) + (np.arange(n) if seed % 3 else 0)
    oi_ref, ti_ref = kafka_reference(
        positions.tolist(), sizes.tolist(), last.tolist(), mts.tolist(), interval, 7
    )
    bounds = [0, *sorted({c for c in cuts if c < n}), n]
    builder = IndexBuilder(7, index_interval_bytes=interval)
    closed = []
    for a, b in itertools.pairwise(bounds):
        if a:
            builder = IndexBuilder.resume(
                *closed[-1][1:],
                size_bytes=int(positions[a]),
                last_offset=int(last[a - 1]),
                index_interval_bytes=interval,
            )
        assert builder.add_batches(positions[a:b], sizes[a:b], last[a:b], mts[a:b]) == b - a
        oi, ti = builder.finish()
        closed.append(
            (b, OffsetIndex.from_bytes(oi.to_bytes(), 7), TimeIndex.from_bytes(ti.to_bytes(), 7))
        )
    assert list(closed[-1][1]) == oi_ref
    assert list(closed[-1][2]) == ti_ref
    for b, oi, ti in closed[:-1]:
        end = int(positions[b]) if b < n else int(positions[-1] + sizes[-1])
        clipped = prefix_indexes(closed[-1][1], closed[-1][2], end, int(last[b - 1]) + 1)
        got_oi, got_ti = clipped if clipped is not None else closed[-1][1:]
        assert list(got_oi) == list(oi)
        assert list(got_ti) in (list(ti), list(ti)[:-1])


@SETTINGS
@given(st.integers(0, 2**32), st.integers(1, 4), st.integers(2, 5))
def test_builder_stops_where_the_segment_must_roll(seed: int, max_oi: int, max_ti: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    sizes = rng.integers(61, 400, n)
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    last = np.arange(n) * 2 + 1
    mts = np.arange(n) * 10 if seed % 2 else rng.integers(0, 1000, n)
    vec = IndexBuilder(
        0, index_interval_bytes=500, max_index_entries=max_oi, max_time_index_entries=max_ti
    )
    added = vec.add_batches(positions, sizes, last, mts)
    one = IndexBuilder(
        0, index_interval_bytes=500, max_index_entries=max_oi, max_time_index_entries=max_ti
    )
    count = 0
    for args in zip(positions.tolist(), sizes.tolist(), last.tolist(), mts.tolist(), strict=True):
        if one.is_full:  # Kafka's roll check before each append
            assert not one.add_batch(*args)
            break
        assert one.add_batch(*args)
        count += 1
    assert added == count < n
    assert vec.is_full and one.is_full
    assert vec.offset_index.to_bytes() == one.offset_index.to_bytes()
    assert vec.time_index.to_bytes() == one.time_index.to_bytes()
    assert vec.add_batches(positions[added:], sizes[added:], last[added:], mts[added:]) == 0
    vec.finish()  # the reserved slot takes the forced entry
    assert len(vec.time_index) <= max_ti


def test_builder_with_one_slot_indexes_takes_one_batch_per_segment() -> None:
    b = IndexBuilder(0, index_interval_bytes=0, max_index_entries=1, max_time_index_entries=1)
    assert b.is_full  # the time index keeps its only slot for the roll
    assert b.add_batches([0, 100], [100, 100], [0, 1], [5, 6]) == 1
    assert not b.add_batch(100, 100, 1, 6)
    assert list(b.finish()[1]) == [(5, 0)]


def test_builder_rolls_before_a_relative_offset_overflow_and_rejects_disorder() -> None:
    b = IndexBuilder(10)
    assert (
        b.add_batches([0, 100, 200], [100, 100, 100], [10, 11, 10 + INT32_MAX + 1], [5, 6, 7]) == 2
    )
    assert not b.fits(10 + INT32_MAX + 1)
    with pytest.raises(InvalidIndexAppendError, match="position 300: batch last offset 11 is not"):
        b.add_batches([300], [100], [11], [8])
    with pytest.raises(InvalidIndexAppendError, match="below the segment base offset"):
        IndexBuilder(10).add_batch(0, 100, 9, 1)
    with pytest.raises(InvalidIndexAppendError, match="last offset 3 is not above"):
        IndexBuilder(0).add_batches([0, 100, 200], [100] * 3, [1, 5, 3], [0] * 3)


def test_builder_resumes_like_a_restarted_broker(tmp_path: Path) -> None:
    """A restart resets the byte count and the close forces a time index entry."""
    oi = OffsetIndex.open(tmp_path / "0.index", 0, writable=True)
    ti = TimeIndex.open(tmp_path / "0.timeindex", 0, writable=True)
    first = IndexBuilder(0, index_interval_bytes=250, offset_index=oi, time_index=ti)
    assert first.add_batches([0, 100, 200], [100] * 3, [0, 1, 2], [10, 30, 20]) == 3
    first.finish()
    assert list(ti) == [(30, 1)]
    second = IndexBuilder(0, index_interval_bytes=250, offset_index=oi, time_index=ti)
    assert (second.max_timestamp, second.bytes_since_last_entry) == (30, 0)
    assert second.add_batches([300, 400, 500, 600], [100] * 4, [3, 4, 5, 6], [25, 40, 5, 50]) == 4
    second.finish()
    assert list(oi) == [(6, 600)]
    assert list(ti) == [(30, 1), (50, 6)]
    oi.close()
    ti.close()
    assert (tmp_path / "0.index").stat().st_size == 8
    assert (tmp_path / "0.timeindex").stat().st_size == 24
